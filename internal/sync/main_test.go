package sync_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The fetcher goroutines of pipelined sweeps must all end with their run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
