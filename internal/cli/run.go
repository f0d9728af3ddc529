package cli

import "errors"

func cmdRun(e *env) error { return errors.New("not yet") }

func cmdBench(e *env) error { return errors.New("not yet") }
