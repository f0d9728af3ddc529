package erpsim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// FleetOptions configures a Fleet.
type FleetOptions struct {
	// Tenants is the number of tenants, named src000, src001, ... (default
	// 1). Ignored when Names is set.
	Tenants int
	// Names, if set, names the tenants instead. Each name must be one path
	// segment that needs no escaping (letters, digits, '-', '_', '.').
	Names []string
	// Template is the options of every tenant, with its defaults. Tenant i
	// (from 0) gets Seed Template.Seed+i, so that tenants hold different
	// data (invoice totals and customers, fixture amounts) and issue
	// cursors the others refuse.
	Template Options
}

// Fleet serves many independent simulated installations from one
// http.Handler, tenant <name> under the path prefix /t/<name>: a client whose
// base URL is http://host/t/src042 talks to tenant src042 exactly as it would
// to a plain Sim. Each tenant is its own *Sim with its own data, tokens,
// request log (paths recorded without the prefix) and knobs; DRF next links
// carry the prefix. Tenants share the strings that repeat across them
// (invoice numbers, dates, customer names): 200 tenants of 3000 invoices
// take about 125 MiB, nearly all of it the Invoice values themselves.
type Fleet struct {
	names   []string
	tenants map[string]*Sim
}

// NewFleet creates the tenants. It panics on a name that is empty, repeated
// or not a plain path segment, as that is a bug in the test that asks.
func NewFleet(opts FleetOptions) *Fleet {
	names := slices.Clone(opts.Names)
	if len(names) == 0 {
		for i := range max(opts.Tenants, 1) {
			names = append(names, fmt.Sprintf("src%03d", i))
		}
	}
	tmpl := opts.Template.withDefaults()
	numbers := &invoiceNumbers{}
	f := &Fleet{names: names, tenants: make(map[string]*Sim, len(names))}
	for i, name := range names {
		if !plainSegment(name) || f.tenants[name] != nil {
			panic(fmt.Sprintf("erpsim: bad or repeated tenant name %q", name))
		}
		o := tmpl
		o.Seed += int64(i)
		f.tenants[name] = newWithNumbers(o, numbers)
	}
	return f
}

// plainSegment reports whether name is a path segment that reads the same
// escaped and unescaped, so the prefix can be cut from either form.
func plainSegment(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.", c)
		if !ok {
			return false
		}
	}
	return true
}

// Tenant returns the simulator of tenant name, nil if there is none.
func (f *Fleet) Tenant(name string) *Sim { return f.tenants[name] }

// Names returns the tenant names in creation order.
func (f *Fleet) Names() []string { return slices.Clone(f.names) }

// ServeHTTP hands the request to its tenant with the /t/<name> prefix cut
// from the path; anything outside a known tenant answers 404.
func (f *Fleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/t/")
	name, rest, ok2 := strings.Cut(rest, "/")
	sim := f.tenants[name]
	if !ok || !ok2 || sim == nil {
		notFound(w)
		return
	}
	prefix := "/t/" + name
	u := *r.URL
	u.Path = "/" + rest
	// The escaped form keeps escaped slashes of ids; the name reads the
	// same in both forms.
	u.RawPath = strings.TrimPrefix(u.RawPath, prefix)
	r2 := r.WithContext(context.WithValue(r.Context(), basePathKey{}, prefix))
	r2.URL = &u
	sim.ServeHTTP(w, r2)
}

// Serve serves the fleet on ln until ctx is done, like Sim.Serve.
func (f *Fleet) Serve(ctx context.Context, ln net.Listener) error {
	return serve(ctx, ln, f)
}

type basePathKey struct{}

// basePath is the path prefix the request came in under (a fleet tenant's
// /t/<name>), "" for a plain simulator.
func basePath(r *http.Request) string {
	p, _ := r.Context().Value(basePathKey{}).(string)
	return p
}
