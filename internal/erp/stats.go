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
	// itself counts 1.
	Depth int
	// IntDigits is the most integer digits of a nonzero JSON number, the
	// exponent counted: 123 is 3, 1e5 is 6, 0.05e3 is 2.
	IntDigits int
	// FracDigits is the largest scale of a JSON number: digits after the
	// point minus the exponent, at least 0: 1.25 is 2, 1e-5 is 5, 0e-7 is 7.
	FracDigits int
}

// Stats returns the record's value facts.
func (r Record) Stats() ValueStats { return r.stats }
