package sync

import (
	"context"

	"github.com/erpsync/erpsync/internal/db"
)

// runSteps runs a Stepper's steps, one transaction each.
func (r *Run) runSteps(ctx context.Context, s Stepper) error {
	return s.Steps(ctx, r, func(step Step) error {
		err := r.commit(ctx, stepUnit(step))
		step.Hold.release()
		if err != nil {
			return err
		}
		return r.Stopped()
	})
}

// stepUnit is the transaction of one step: its rows, as its Write writes
// them, counted with what it read.
type stepUnit Step

func (s stepUnit) write(ctx context.Context, tx db.Tx) (written, error) {
	w := written{stats: s.Read}
	if s.Write == nil {
		return w, nil
	}
	wrote, err := s.Write(ctx, tx)
	w.stats.Add(wrote)
	return w, err
}
