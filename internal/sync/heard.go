package sync

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// What a run says an operator should hear of, besides what its stream
// warns of (Run.Warn): what its records showed, drift and rejected
// records, and the deletions the guard held. Its summary line is then at
// WARN, `erpsync status` shows it, and `erpsync sync --strict` fails it.

// driftAdded is the drift of a field the stream does not expect. The
// record is kept whole in payload and every typed column still reads:
// nothing is lost, so it is counted (erp.schema_drift, the metric) but not
// warned of; installations send fields the reference does not show.
const driftAdded = "added"

// driftWords say each change of drift heard as a sentence reads it.
var driftWords = map[string]string{"missing": "missing", "type": "of another type", "scale": "of another scale",
	driftUnusable: "unreadable", "duplicate": "listed twice"}

// recordWarnings says what the run's records showed that an operator
// should hear of: drift of every change but a field added, and records
// rejected. For the run's own summary (counts): one warning for its drift
// and one for its rejections, with their counts. For the stream's standing
// warning (not counts): one per kind of drift, without counts, so that a
// later run that meets some of it again adds only what is not there yet
// (a follow run's few records, or a sweep's pages known unchanged, which
// are not read column by column, count differently).
func (res *runResult) recordWarnings(counts bool) []string {
	var out, drift []string
	entries := slices.Clone(res.drift)
	slices.SortFunc(entries, func(a, b db.Drift) int {
		return cmp.Or(strings.Compare(a.Field, b.Field), strings.Compare(a.Change, b.Change), strings.Compare(a.Detail, b.Detail))
	})
	for _, d := range entries {
		if d.Change == driftAdded {
			continue
		}
		s := d.Field + " " + cmp.Or(driftWords[d.Change], d.Change)
		if counts {
			s += " in " + records(d.Count)
		}
		if d.Detail != "" {
			s += " (" + d.Detail + ")"
		}
		drift = append(drift, s)
	}
	switch {
	case len(drift) == 0:
	case counts:
		out = append(out, "drift: "+strings.Join(drift, ", ")+"; see erp.schema_drift")
	default:
		for _, d := range drift {
			out = append(out, "drift: "+d)
		}
	}
	if n := res.stats.Rejected; n > 0 {
		what := "records rejected"
		if counts {
			what = records(n) + " rejected"
		}
		out = append(out, what+"; see erp.rejected_records")
	}
	return out
}

func records(n int64) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}

// warnings is everything the run warned of, for its Result.
func (res *runResult) warnings(stream string) []string {
	out := append(slices.Clone(res.warns), res.recordWarnings(true)...)
	if res.held > 0 {
		out = append(out, HeldWarning(res.held, stream))
	}
	return out
}

// HeldWarning says that the deletion guard holds n rows of stream, and
// how an operator lets them go.
func HeldWarning(n int64, stream string) string {
	return fmt.Sprintf("%d deletions held: erpsync sync --confirm-deletions %s, if they are real", n, stream)
}

// keepWarnings records, once a run succeeded, what `erpsync status` shows
// of it. A run that read the whole stream replaces the login's standing
// warning with what it warned of (a clean one clears it); any other adds
// to it what it warned of, since it reads too little to clear the rest.
// Held deletions are not among them: status reads those from the
// checkpoint.
func keepWarnings(ctx context.Context, q db.Querier, k model.Key, whole bool, res *runResult) error {
	standing := append(slices.Clone(res.warns), res.recordWarnings(false)...)
	if whole {
		return db.SetWarning(ctx, q, k, strings.Join(standing, "; "))
	}
	for _, w := range standing {
		if err := db.AddWarning(ctx, q, k, w); err != nil {
			return err
		}
	}
	return nil
}
