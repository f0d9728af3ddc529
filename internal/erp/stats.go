package erp

// ValueStats are facts about the values of one record that a store may
// refuse, measured by the scanner in the same pass that validated the
// record. They say nothing about what is acceptable: the warehouse decides
// that (see db.CheckStorable).
type ValueStats struct {
	InvalidUTF8   bool // a string (key or value) holds bytes that are not UTF-8
	NULEscape     bool // a string holds the escape \u0000
	LoneSurrogate bool // a \ud800-\udfff escape that is not a high+low pair
	// Depth is the deepest nesting of objects and arrays; the record
	// itself counts 1 (a record that is a string or number counts 0).
	Depth int
	// IntDigits is the most integer digits of the record's nonzero JSON
	// numbers, the exponent counted (123 has 3, 1e5 6, 0.05e3 2, 0.001
	// -2), or 0 when none has more.
	IntDigits int
	// FracDigits is the largest scale of a JSON number: digits after the
	// point minus the exponent, at least 0: 1.25 is 2, 1e-5 is 5, 0e-7 is 7.
	//
	// Both digit counts stop at 2^31-1, so that no exponent, however
	// long, overflows them; that is far beyond what any store accepts.
	FracDigits int
}

// Stats returns the record's value facts.
func (r Record) Stats() ValueStats { return r.stats }
