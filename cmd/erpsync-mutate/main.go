// Command erpsync-mutate runs `make mutate`: mutation testing, with a
// pinned gremlins, of the files whose mistakes would lose, double or
// falsely delete a row, one file at a time, printing each file's efficacy
// beside its goal and the mutants that survived.
//
//	erpsync-mutate [--files a.go,b.go] [--pkg internal/erp] [--list]
//
// It exits 1 when a file misses its goal (--check-goals=false: the report
// only). Not part of CI: a file takes minutes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/erpsync/erpsync/internal/mutation"
)

func main() {
	files := flag.String("files", "", "the target `files` to mutate, separated by commas (default all)")
	pkg := flag.String("pkg", "", "mutate the targets in this package `directory`")
	list := flag.Bool("list", false, "list the targets, their tests and goals, and exit")
	workers := flag.Int("workers", 1, "mutants tested at once")
	timeout := flag.Int("timeout-coefficient", 0, "gremlins's timeout coefficient (0: its own)")
	checkGoals := flag.Bool("check-goals", true, "exit 1 when a file misses its goal")
	flag.Parse()

	var names []string
	for _, f := range strings.Split(*files, ",") {
		if f = strings.TrimSpace(f); f != "" {
			names = append(names, f)
		}
	}
	targets, err := mutation.Select(mutation.Targets, names, *pkg)
	if err != nil {
		fail(err)
	}
	if *list {
		for _, t := range targets {
			fmt.Printf("%s (goal %.0f%%): %s\n    -run %s\n    %d mutants listed as equivalent\n",
				t.File, t.Goal, t.What, t.Tests, len(mutation.Equivalents[t.File]))
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	bin, err := mutation.Install(ctx, "bin")
	if err != nil {
		fail(err)
	}
	o := mutation.Options{Gremlins: bin, Root: root, Workers: *workers, TimeoutCoefficient: *timeout, Progress: os.Stdout}
	var results []mutation.Result
	for _, t := range targets {
		fmt.Printf("== %s: %s\n", t.File, t.What)
		r, err := mutation.Run(ctx, o, t)
		if err != nil {
			fail(err)
		}
		results = append(results, r)
	}
	missed := mutation.Report(os.Stdout, results)
	if len(missed) == 0 {
		fmt.Println("\nevery goal met")
		return
	}
	fmt.Printf("\n%v:\n  %s\n", mutation.ErrGoalsMissed, strings.Join(missed, "\n  "))
	if *checkGoals {
		os.Exit(1)
	}
}

func fail(err error) {
	if errors.Is(err, context.Canceled) {
		os.Exit(130)
	}
	fmt.Fprintf(os.Stderr, "erpsync-mutate: %v\n", err)
	os.Exit(1)
}
