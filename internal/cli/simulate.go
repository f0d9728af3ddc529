package cli

import (
	"fmt"
	"net"
	"time"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// cmdSimulate serves the ERP simulator (docker-compose, manual tests).
func cmdSimulate(e *command) error {
	fs, _ := e.flags("simulate")
	addr := fs.String("addr", "127.0.0.1:8090", "listen `address`")
	o := erpsim.Options{}
	fs.IntVar(&o.Invoices, "invoices", 1000, "number of invoices")
	fs.IntVar(&o.PageSizeCap, "page-size-cap", 500, "largest page_size honoured")
	fs.DurationVar(&o.TokenTTL, "token-ttl", time.Hour, "token lifetime")
	fs.DurationVar(&o.Latency, "latency", 0, "latency added to every answer")
	fs.BoolVar(&o.MoneyAsString, "money-as-string", false, "send money as JSON strings")
	envelope := fs.String("envelope", "data", "envelope of the simple lists: data, array, results, datatables")
	preEncode := fs.Int("pre-encode", 0, "encode the invoice pages of this page size once up front (serving fast for measurements)")
	fs.IntVar(&o.Faults.RateLimitEvery, "rate-limit-every", 0, "answer every Nth data request with 429")
	fs.IntVar(&o.Faults.ServerErrorEvery, "server-error-every", 0, "answer every Nth data request with 503")
	fs.IntVar(&o.Faults.DropEvery, "drop-every", 0, "drop the connection of every Nth data request")
	if err := e.parse(fs); err != nil {
		return err
	}
	o.ListEnvelope = erpsim.Envelope(*envelope)
	switch o.ListEnvelope {
	case erpsim.EnvelopeData, erpsim.EnvelopeArray, erpsim.EnvelopeResults, erpsim.EnvelopeDataTables:
	default:
		return usageErrorf("--envelope: %q is not data, array, results or datatables", *envelope)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	sim := erpsim.New(o)
	if *preEncode > 0 {
		sim.PreEncodeInvoicePages(*preEncode)
	}
	fmt.Fprintf(e.stderr, "erpsync simulator on http://%s (user erpsync, password erpsync-demo-password), %d invoices\n", ln.Addr(), o.Invoices)
	return sim.Serve(ctx, ln)
}
