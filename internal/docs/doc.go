// Package docs holds the tests that keep the documentation true to the repository.
package docs
