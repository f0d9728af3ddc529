package cli

import "errors"

func cmdBench(e *env) error { return errors.New("bench: not implemented yet") }
