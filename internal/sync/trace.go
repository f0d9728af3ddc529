package sync

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/tracing"
)

// The spans of a run: one per run (a stream through one login), under it
// one per page fetched and one per commit, and under a page the ERP
// requests (internal/erp). Their attributes are counters and names, never
// a record, a cursor or a credential; a span is never made per record. A
// failed span says so without the error's text, which may quote an
// answer of the ERP or a row: that text is in the log line carrying the
// same trace_id. The attributes are set only on a recording span, so that
// with tracing off a span costs no attribute.
const (
	attrSweepID = attribute.Key("erpsync.sweep_id")
	attrPage    = attribute.Key("erpsync.page") // a page's number in its sweep
)

// tracer is looked up at each span, so that it is the global provider of
// the moment (the no-op one when tracing is off).
func tracer() trace.Tracer { return otel.Tracer("github.com/erpsync/erpsync/internal/sync") }

// startRunSpan starts the span of one run and binds log to it, so that
// the run's lines (its summary too) carry the trace's ids.
func startRunSpan(ctx context.Context, source, stream string, kind model.RunKind, login string, log *slog.Logger) (context.Context, trace.Span, *slog.Logger) {
	ctx, span := tracer().Start(ctx, "run")
	if span.IsRecording() {
		span.SetName("run " + stream)
		span.SetAttributes(attribute.String("erpsync.source", source), attribute.String("erpsync.stream", stream),
			attribute.String("erpsync.run.kind", string(kind)), attribute.String("erpsync.login", login))
	}
	return ctx, span, tracing.Logger(ctx, log)
}

// endRunSpan records the run's outcome and ends its span.
func endRunSpan(span trace.Span, res Result) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int64("erpsync.run_id", res.RunID), attribute.String("erpsync.status", string(res.Status)))
	if res.SweepID != 0 {
		span.SetAttributes(attrSweepID.Int64(res.SweepID))
	}
	setStats(span, res.Stats)
	if res.Status == model.StatusFailed {
		span.SetStatus(codes.Error, "run failed")
	}
}

// startPageSpan starts the span of fetching and preparing page n.
func startPageSpan(ctx context.Context, r *Run, n int64) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, "page")
	if span.IsRecording() {
		span.SetAttributes(attrPage.Int64(n), attrSweepID.Int64(r.result.sweepID))
	}
	return ctx, span
}

// endPageSpan records what the page held and ends its span.
func endPageSpan(span trace.Span, f fetched) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if f.err != nil {
		span.SetStatus(codes.Error, "page failed")
		return
	}
	span.SetAttributes(attribute.Int("erpsync.records", f.page.received), attribute.Bool("erpsync.page.known", f.page.known),
		attribute.Bool("erpsync.page.last", f.page.last))
}

// commitSpan is the span of one commit; it knows the run's counters
// before it, so that it can tell what the commit wrote.
type commitSpan struct {
	span   trace.Span
	before model.RunStats
}

// startCommitSpan starts the span of one transaction of the run.
func (r *Run) startCommitSpan(ctx context.Context) (context.Context, commitSpan) {
	ctx, span := tracer().Start(ctx, "commit")
	return ctx, commitSpan{span: span, before: r.result.stats}
}

// end records what the commit wrote (the pages of w, if a walk's) and
// ends the span.
func (c commitSpan) end(r *Run, w written, err error) {
	defer c.span.End()
	if !c.span.IsRecording() {
		return
	}
	if err != nil {
		c.span.SetStatus(codes.Error, "commit failed")
		return
	}
	if w.first > 0 {
		c.span.SetAttributes(attrSweepID.Int64(r.result.sweepID), attrPage.Int64(w.first), attribute.Int64("erpsync.page.through", w.through))
	}
	a, b := r.result.stats, c.before
	setStats(c.span, model.RunStats{Pages: a.Pages - b.Pages, Seen: a.Seen - b.Seen, Inserted: a.Inserted - b.Inserted,
		Updated: a.Updated - b.Updated, Unchanged: a.Unchanged - b.Unchanged, Rejected: a.Rejected - b.Rejected, Deleted: a.Deleted - b.Deleted})
}

func setStats(span trace.Span, st model.RunStats) {
	span.SetAttributes(attribute.Int64("erpsync.pages", st.Pages), attribute.Int64("erpsync.rows.seen", st.Seen),
		attribute.Int64("erpsync.rows.inserted", st.Inserted), attribute.Int64("erpsync.rows.updated", st.Updated),
		attribute.Int64("erpsync.rows.unchanged", st.Unchanged), attribute.Int64("erpsync.rows.rejected", st.Rejected),
		attribute.Int64("erpsync.rows.deleted", st.Deleted))
}
