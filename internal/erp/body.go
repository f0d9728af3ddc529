package erp

import (
	"errors"
	"io"
)

// Reading an answer of unknown size (no Content-Length: chunked, or
// decompressed on the way) into one growing buffer would hold, while it
// grows past the limit, the old copy and the new one: twice the limit or
// more for an answer that is then refused. So only answers up to
// contiguousMax are read into one buffer (the page's pooled one, with no
// copy); beyond, the answer is read in chunks of chunkSize, which never
// hold more than the limit and one chunk, and is assembled into one body
// of the exact size only once it is known to fit.
const (
	contiguousMax = 4 << 20
	chunkSize     = 1 << 20
	minRead       = 512
)

// errOverLimit is an answer over the limit; exchange reports it as a
// TooLargeError.
var errOverLimit = errors.New("answer larger than the limit")

// readBody reads r to its end, at most limit bytes of it (limit+1 are read
// to tell an answer of exactly limit bytes from a larger one); length is
// the announced size, -1 if unknown. With into, its memory is used for the
// answer, and it keeps the (possibly grown) buffer for the next answer.
func readBody(r io.Reader, length, limit int64, into *[]byte) ([]byte, error) {
	if length > limit {
		return nil, errOverLimit
	}
	var b []byte
	if into != nil {
		b = (*into)[:0]
		defer func() { *into = b[:0] }()
	}
	r = io.LimitReader(r, limit+1)
	if length >= 0 && int64(cap(b)) <= length {
		// The exact size, and a byte for the read that sees the end.
		b = make([]byte, 0, length+1)
	}
	for {
		if len(b) == cap(b) {
			if cap(b) >= contiguousMax {
				return readChunks(r, b, limit)
			}
			grown := make([]byte, len(b), min(max(2*cap(b), minRead), contiguousMax, int(limit+1)))
			copy(grown, b)
			b = grown
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, errOverLimit
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readChunks reads the rest of an answer whose start is first (full), in
// chunks, then assembles the answer.
func readChunks(r io.Reader, first []byte, limit int64) ([]byte, error) {
	// An answer that ends right there needs no chunk and no copy.
	probe := make([]byte, 1)
	switch _, err := io.ReadFull(r, probe); {
	case err == io.EOF:
		return first, nil
	case err != nil:
		return nil, err
	}
	chunks := [][]byte{first, probe}
	total := int64(len(first)) + 1
	for eof := false; !eof; {
		if total > limit {
			return nil, errOverLimit
		}
		c := make([]byte, 0, min(chunkSize, limit+1-total))
		for len(c) < cap(c) {
			n, err := r.Read(c[len(c):cap(c)])
			c = c[:len(c)+n]
			if total += int64(n); total > limit {
				return nil, errOverLimit
			}
			if err == io.EOF {
				eof = true
				break
			}
			if err != nil {
				return nil, err
			}
		}
		chunks = append(chunks, c)
	}
	body := make([]byte, 0, total)
	for i, c := range chunks {
		body = append(body, c...)
		chunks[i] = nil // collectable while the rest is copied
	}
	return body, nil
}
