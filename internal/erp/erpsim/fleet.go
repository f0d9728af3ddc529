package erpsim

import (
	"context"
	"net/http"
)

type basePathKey struct{}

// basePath is the path prefix the request came in under (a fleet tenant's
// /t/<name>), "" for a plain simulator.
func basePath(r *http.Request) string {
	p, _ := r.Context().Value(basePathKey{}).(string)
	return p
}

var _ = context.Background
