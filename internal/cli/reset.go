package cli

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// cmdReset starts a stream over (sync.Runner.Reset) in every source that
// enables it, or one (--source), for every login or one (--login).
func cmdReset(e *command) error {
	fs, cfgFile := e.flags("reset")
	login := fs.String("login", "", "reset for this login only (its username or client id)")
	source := fs.String("source", "", "reset in this source only")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if err := e.parse(fs); err != nil {
		return err
	}
	names := e.positional()
	if len(names) != 1 {
		return usageErrorf("reset takes one stream: erpsync reset STREAM [--login NAME] [--source NAME] [--yes]")
	}
	cfg, err := e.loadConfigForStreams(*cfgFile)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	type job struct {
		target sync.Target
		stream sync.Stream
	}
	var jobs []job
	for _, src := range cfg.Sources {
		if *source != "" && src.Name != *source {
			continue
		}
		streams, err := e.streamsFor(src, names)
		if err != nil {
			return err
		}
		if _, enabled := src.Stream(names[0]); !enabled {
			continue
		}
		t, err := targetOf(src, log, nil)
		if err != nil {
			return err
		}
		if *login != "" {
			i := slices.IndexFunc(t.Logins, func(l sync.Login) bool { return l.Name == *login })
			if i < 0 {
				continue
			}
			t.Logins = t.Logins[i : i+1]
		}
		jobs = append(jobs, job{t, streams[0]})
	}
	if len(jobs) == 0 {
		return usageErrorf("reset: no source enables %s%s%s", names[0], inSource(*source), forLogin(*login))
	}
	var what []string
	for _, j := range jobs {
		var logins []string
		for _, l := range j.target.Logins {
			logins = append(logins, l.Name)
		}
		what = append(what, fmt.Sprintf("%s in source %s (login %s)", names[0], j.target.Source, strings.Join(logins, ", ")))
	}
	fmt.Fprintf(e.stdout, "Resetting %s.\nEvery row and every version is kept; the next run of each login reads everything again, comparing row by row.\n",
		strings.Join(what, "; "))
	if !*yes {
		if !isTerminal(e.stdin) {
			return usageErrorf("reset asks for confirmation on a terminal; pass --yes to reset without one")
		}
		fmt.Fprint(e.stdout, "Go on? [y/N] ")
		answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return usageErrorf("reset not confirmed; nothing was changed")
		}
	}
	ctx, cancel := e.signalContext()
	defer cancel()
	runner, pools, err := openRunner(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pools.Close()
	failed := 0
	for _, j := range jobs {
		for _, res := range runner.Reset(ctx, j.target, j.stream) {
			switch {
			case errors.Is(res.Err, sync.ErrBusy):
				return fmt.Errorf("%s/%s: nothing reset: %w; try again once it lets go (erpsync status)", j.target.Source, names[0], res.Err)
			case res.Err != nil || res.Status != model.StatusSucceeded:
				failed++
				fmt.Fprintf(e.stdout, "%s/%s (%s): reset failed: %v\n", j.target.Source, names[0], res.Login, res.Err)
			default:
				fmt.Fprintf(e.stdout, "%s/%s (%s): reset; its next run reads everything again\n", j.target.Source, names[0], res.Login)
			}
		}
		sync.RevokeTokens([]sync.Target{j.target}, cfg.Shutdown.Revoke, log)
	}
	if failed > 0 {
		return fmt.Errorf("%d reset(s) failed", failed)
	}
	return nil
}

func inSource(s string) string {
	if s == "" {
		return ""
	}
	return " in source " + s
}

func forLogin(l string) string {
	if l == "" {
		return ""
	}
	return " with login " + l
}
