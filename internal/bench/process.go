package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// What the reports share to run the measured binary against the
// simulator: the simulator served on loopback, the environment of an
// erpsync process, and erpsync processes started, watched and stopped.

// serveSim serves sim on a loopback port until ctx ends and returns its
// base URL.
func serveSim(ctx context.Context, sim *erpsim.Sim) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go sim.Serve(ctx, ln)
	return "http://" + ln.Addr().String(), nil
}

// erpsyncEnv is the environment of an erpsync process measured against
// the simulator at base: its warehouse, the simulator's user, the page
// size asked, JSON logs of warnings and errors only, and no configuration
// file (the variables are the whole configuration); extra comes last, so
// it wins.
func erpsyncEnv(dbURL, base string, pageSize int, extra ...string) []string {
	env := append(os.Environ(),
		"ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_ERP_BASE_URL="+base,
		"ERPSYNC_ERP_USERNAME=erpsync", "ERPSYNC_ERP_PASSWORD=erpsync-demo-password",
		"ERPSYNC_ERP_PAGE_SIZE="+strconv.Itoa(pageSize), "ERPSYNC_LOG_FORMAT=json", "ERPSYNC_LOG_LEVEL=warn",
		"ERPSYNC_CONFIG=")
	return append(env, extra...)
}

// process is an erpsync process the report started.
type process struct {
	what   string // its command line, for errors
	stderr *tail
	cancel context.CancelFunc
	done   chan struct{} // closed when it has exited; err is then set
	err    error
}

// stopWait is how long a stopped process has to exit after SIGTERM
// before it is killed: longer than erpsync's default shutdown timeout.
const stopWait = 40 * time.Second

// startErpsync starts the binary with args. Ending ctx, or stop, sends
// it SIGTERM, as an operator's stop would.
func startErpsync(ctx context.Context, binary string, env []string, args ...string) (*process, error) {
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopWait
	p := &process{what: "erpsync " + strings.Join(args, " "), stderr: &tail{max: 8 << 10}, cancel: cancel, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("%s: %w", p.what, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// runErpsync runs the binary with args to its end, within timeout, and
// returns how long it took.
func runErpsync(ctx context.Context, timeout time.Duration, binary string, env []string, args ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	p, err := startErpsync(ctx, binary, env, args...)
	if err != nil {
		return 0, err
	}
	<-p.done
	secs := time.Since(start).Seconds()
	if ctx.Err() == context.DeadlineExceeded {
		return secs, fmt.Errorf("%s did not finish within %s: %s", p.what, timeout, p.stderr)
	}
	return secs, p.failure()
}

// failure is why the process ended, if it has ended badly.
func (p *process) failure() error {
	if p.err != nil {
		return fmt.Errorf("%s: %v: %s", p.what, p.err, p.stderr)
	}
	return nil
}

// exited says, with its error output, that the process has ended when it
// has; nil while it runs.
func (p *process) exited() error {
	select {
	case <-p.done:
		if err := p.failure(); err != nil {
			return err
		}
		return fmt.Errorf("%s exited: %s", p.what, p.stderr)
	default:
		return nil
	}
}

// stop sends the process SIGTERM and waits for it to exit.
func (p *process) stop() {
	p.cancel()
	<-p.done
}

// tail keeps the last max bytes written to it: a process's last words.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
