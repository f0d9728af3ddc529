package sync

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// runSteps runs a Stepper's steps, one transaction each.
func (r *Run) runSteps(ctx context.Context, s Stepper) error {
	return s.Steps(ctx, r, func(step Step) error {
		err := r.commit(ctx, nil, nil, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
			st := step.Read
			if step.Write == nil {
				return st, nil
			}
			w, err := step.Write(ctx, tx)
			st.Add(w)
			return st, err
		})
		step.Hold.release()
		if err != nil {
			return err
		}
		return r.Stopped()
	})
}
