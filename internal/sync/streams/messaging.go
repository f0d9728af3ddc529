package streams

import (
	"context"
	"fmt"
	"net/http"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// Messaging is the messaging channel, under the installation's messaging
// prefix ({messaging}, /messaging by default): four lists, whose fields the
// reference does not show (no typed columns, no expectations: everything
// is in payload), and a statistics snapshot. The channel's settings are
// never read: they may hold its secrets.
func Messaging() []sync.Stream {
	out := []sync.Stream{MessagingStats()}
	for _, l := range []struct{ stream, path string }{
		{"messaging_conversations", "{messaging}/api/conversations/"},
		{"messaging_messages", "{messaging}/api/messages/"},
		{"messaging_templates", "{messaging}/api/templates/"},
		{"messaging_queue", "{messaging}/api/queue/"},
	} {
		// The reference calls the messaging routes preliminary.
		out = append(out, &sync.List{Info: sync.Info{Name: l.stream, History: sync.HistoryOn, Contract: sync.ContractUnreviewed}, Path: l.path})
	}
	return out
}

// messagingStats appends a snapshot of the channel's statistics whenever
// it changed.
type messagingStats struct {
	sync.Info
	path string
}

// MessagingStats is the messaging statistics stream.
func MessagingStats() sync.Stream {
	const path = "{messaging}/api/stats/"
	return messagingStats{path: path, Info: sync.Info{Name: "messaging_stats", Route: "GET " + path, Contract: sync.ContractUnreviewed,
		Table: &sync.Table{Name: "messaging_stats", Own: true}}}
}

// Steps reads the snapshot and appends it when it changed; one that
// cannot be stored as it came is set aside, not failed.
func (s messagingStats) Steps(ctx context.Context, r *sync.Run, commit func(sync.Step) error) error {
	path := r.Path(s.path)
	body, err := r.Get(ctx, path, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	rec, payload, err := erp.DecodeObject(erp.RouteLabel(path), body)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	read := model.RunStats{Pages: 1, Seen: 1}
	if err := sync.CheckRecord(rec); err != nil {
		r.Reject(db.Rejected{Reason: err.Error(), Record: payload})
		return commit(sync.Step{Read: read})
	}
	var drift sync.Drift
	statsFields.Check(rec, "stats", &drift)
	r.Drift(drift.Entries()...)
	return commit(sync.Step{Read: read, Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
		wrote, err := db.AppendMessagingStats(ctx, tx, r.Scope(), payload, db.PayloadHash(payload))
		if wrote {
			return model.RunStats{Inserted: 1}, err
		}
		return model.RunStats{Unchanged: 1}, err
	}})
}

// statsFields are the counters a statistics snapshot has been seen to
// carry. The reference shows none: an installation whose snapshot differs
// records drift, as a list does, while the snapshot is kept whole.
var statsFields = sync.NewExpectation(map[string]string{"sent": "number", "failed": "number", "queued": "number"})

// Probe reads the statistics once.
func (s messagingStats) Probe(ctx context.Context, p *sync.Probe) sync.ProbeReport {
	path := p.Path(s.path)
	rep := p.Report(s, "GET "+path)
	body, err := p.Get(ctx, path, nil)
	if err == nil {
		var rec erp.Record
		if rec, _, err = erp.DecodeObject(erp.RouteLabel(path), body); err == nil {
			rep.Status, rep.Envelope, rep.Records, rep.WithID = http.StatusOK, "object", 1, 1
			if err := sync.CheckRecord(rec); err != nil {
				rep.Rejected, rep.RejectedReason = 1, err.Error()
			}
			return rep
		}
	}
	rep.Failed(err)
	return rep
}
