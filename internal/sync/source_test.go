package sync

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// TestPageSource documents a walk's page source, which may fetch pages
// ahead on a goroutine of its own.
func TestPageSource(t *testing.T) {
	t.Run("TurnsAPanicIntoTheWalksErrorAndEndsWhenCancelled", func(t *testing.T) {
		// A panic while a page is decoded or prepared, on the prefetching
		// goroutine, is the walk's error with the stack in the log, not a dead
		// process; cancelling a walk ends its goroutine.
		srv := httptest.NewServer(erpsim.New(erpsim.Options{Invoices: 120}))
		defer srv.Close()
		client, err := erp.New(erp.Options{BaseURL: srv.URL, Username: "erpsync", Password: "erpsync-demo-password"})
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		for _, prefetch := range []int{0, 1, 3} {
			r := &Run{runner: &Runner{Prefetch: prefetch}, View: &View{login: Login{Name: "erpsync", Client: client}, target: Target{PageSize: 50}, scope: model.Scope{Key: model.Key{Stream: "invoices"}}},
				log: slog.New(slog.NewTextHandler(&logs, nil))}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			req := erp.ListRequest{Path: "/sales/api/invoices/list/", Paging: erp.CursorPaged, PageSize: 50}
			pages := 0
			src := r.newPageSource(ctx, req, 0, func(p *erp.Page) *preparedPage {
				if pages++; pages == 2 {
					panic("decoder bug")
				}
				return &preparedPage{}
			}, true)
			b, err := src.next(ctx, nil)
			if err != nil {
				t.Fatalf("prefetch %d: first page: %v", prefetch, err)
			}
			src.release(b)
			_, err = src.next(ctx, nil)
			if err == nil || !strings.Contains(err.Error(), "page 2") || !strings.Contains(err.Error(), "panic: decoder bug") {
				t.Errorf("prefetch %d: err = %v, want page 2's panic", prefetch, err)
			}
			src.close()
			cancel()
		}
		if !strings.Contains(logs.String(), "panic in stream") || !strings.Contains(logs.String(), "source_test.go") {
			t.Errorf("the log lacks the panic and its stack:\n%s", logs.String())
		}

		// Cancelled while fetching ahead: next says so, and close returns.
		r := &Run{runner: &Runner{Prefetch: 2}, View: &View{login: Login{Name: "erpsync", Client: client}, target: Target{PageSize: 50}, scope: model.Scope{Key: model.Key{Stream: "invoices"}}},
			log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		src := r.newPageSource(ctx, erp.ListRequest{Path: "/sales/api/invoices/list/", Paging: erp.CursorPaged, PageSize: 50}, 0,
			func(*erp.Page) *preparedPage { return &preparedPage{} }, true)
		cancel()
		for {
			b, err := src.next(ctx, nil)
			if err != nil {
				if err != context.Canceled {
					t.Errorf("after cancel: err = %v, want context.Canceled", err)
				}
				break
			}
			src.release(b)
		}
		src.close()
	})
}
