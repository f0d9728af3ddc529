package bench

import (
	"context"
	"net"
	"os"
	"strconv"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// What the reports share to run the measured binary against the
// simulator: the simulator served on loopback, and the environment of an
// erpsync process.

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
