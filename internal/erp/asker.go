package erp

import (
	"context"
	"strings"
)

// Asker is what a request serves: the stream and the kind of run or
// command that asked for it (sweep, follow, window, probe, verify, ...).
// The observer counts requests by it, so that an ERP's administrator
// reads what each stream and each kind of run costs. A run or command
// says it once, in the context its requests are made with.
type Asker struct {
	Stream string
	Kind   string
}

// The kinds of request that are no run's own (a run's are its kind:
// sweep, follow, window).
const (
	// KindProbe and KindVerify: erpsync probe's and erpsync verify's reads.
	KindProbe  = "probe"
	KindVerify = "verify"
	// KindLogin: the login's own requests, a token, its revocation and
	// who the login is, whatever run or command needed them.
	KindLogin = "login"
	// KindOther: nothing said what the request served.
	KindOther = "other"
)

type askerKey struct{}

// WithAsker returns ctx carrying what the requests made with it serve.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

// askerOf is what a request of route made with ctx serves.
func askerOf(ctx context.Context, route string) Asker {
	a, _ := ctx.Value(askerKey{}).(Asker)
	if strings.HasPrefix(route, "/api/auth/") {
		a.Kind = KindLogin
	}
	if a.Kind == "" {
		a.Kind = KindOther
	}
	return a
}
