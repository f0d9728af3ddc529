package sync

import (
	"context"

	"github.com/erpsync/erpsync/internal/db"
)

// compareChanged makes the sweep compare, row by row, every known page
// (answered as in the sweep whose digests it uses, sweepID) that holds a
// row changed since that sweep by anything but the sweep itself: a row
// rewritten in the warehouse (by hand, or by a stolen login of the
// daemon's role) while the ERP's answer stayed the same is set right by
// the next sweep, not hidden by the page's digest. The ids join those the
// sweep writes itself (see mayHaveWritten), which already make a known
// page be compared.
func (r *Run) compareChanged(ctx context.Context, t *db.Table, sweepID int64) error {
	ids, err := t.ChangedSince(ctx, r.conn, r.key, sweepID)
	if err != nil {
		return err
	}
	r.wrote(ids)
	return nil
}
