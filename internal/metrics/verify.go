package metrics

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
)

// Verified is the outcome of `erpsync verify` for one stream of a source.
type Verified struct {
	Source, Stream string
	// Done: the stream was compared (false: it could not be).
	Done             bool
	MismatchedRows   int64
	MismatchedGroups int64 // (company, branch, month, column) whose sums differ
}

// Verification is the registry of one `erpsync verify`, for a scheduled
// job: written for node_exporter's textfile collector or pushed to a
// Pushgateway, since the job does not live to be scraped.
func Verification(results []Verified, at time.Time) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	rows := gauge("erpsync_verify_mismatched_rows",
		"Rows that differ between the ERP and the warehouse at the last verification: missing, extra or different (-1: the stream could not be compared).",
		"source", "stream")
	sums := gauge("erpsync_verify_mismatched_sums",
		"Money sums per company, branch, month and column that differ between the ERP and the warehouse at the last verification.",
		"source", "stream")
	when := gauge("erpsync_verify_timestamp_seconds",
		"Unix time of the last verification of the stream.",
		"source", "stream")
	reg.MustRegister(rows, sums, when)
	for _, r := range results {
		if !r.Done {
			rows.WithLabelValues(r.Source, r.Stream).Set(-1)
			continue
		}
		rows.WithLabelValues(r.Source, r.Stream).Set(float64(r.MismatchedRows))
		sums.WithLabelValues(r.Source, r.Stream).Set(float64(r.MismatchedGroups))
		when.WithLabelValues(r.Source, r.Stream).Set(float64(at.Unix()))
	}
	return reg
}

// WriteTextfile writes the registry for node_exporter's textfile
// collector, atomically.
func WriteTextfile(path string, reg *prometheus.Registry) error {
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return fmt.Errorf("metrics file %s: %w", path, err)
	}
	return nil
}

// Push sends the registry to a Pushgateway as job erpsync_verify. A
// user and password in the URL are sent as basic auth and kept out of
// the URL, so no error can quote them.
func Push(gateway string, reg *prometheus.Registry) error {
	u, err := url.Parse(gateway)
	if err != nil || u.Host == "" {
		return errors.New("pushgateway: the URL cannot be parsed (expected http://host:9091)")
	}
	user := u.User
	u.User = nil
	p := push.New(u.String(), "erpsync_verify").Gatherer(reg)
	if user != nil {
		pass, _ := user.Password()
		p = p.BasicAuth(user.Username(), pass)
	}
	if err := p.Push(); err != nil {
		return fmt.Errorf("pushgateway: %w", err)
	}
	return nil
}
