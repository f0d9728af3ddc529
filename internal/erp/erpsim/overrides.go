package erpsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
)

// Per-route overrides let a test make one route of an installation behave
// differently: refuse access, answer nothing, answer far too much, use an
// envelope nobody knows or drift its fields. A route is named by its path as
// the client requests it, unescaped and, for a fleet tenant, without the
// /t/<name> prefix: "/accounts/api/cashboxes/",
// "/accounts/api/cashboxes/2/access/",
// "/accounts/api/journal-entries/JE/2026/000001/journal-preview/".

type routeOverride struct {
	status          int
	empty           bool
	huge            hugeAnswer
	unknownEnvelope bool
	drift           *fieldDrift
	cut             int
}

func (o routeOverride) isZero() bool {
	return o.status == 0 && !o.empty && o.huge.size == 0 && !o.unknownEnvelope && o.drift == nil && o.cut == 0
}

// setOverride edits the override of path under the lock.
func (s *Sim) setOverride(path string, edit func(*routeOverride)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.overrides[path]
	edit(&o)
	if o.isZero() {
		delete(s.overrides, path)
	} else {
		s.overrides[path] = o
	}
}

func (s *Sim) override(path string) routeOverride {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overrides[path]
}

// SetRouteStatus makes the data route at path answer status, after the
// credentials are checked, whatever the route would answer otherwise, as an
// installation that lacks a module or denies a permission does. 403 answers
// {"detail":"You do not have permission to perform this action."}, 404
// {"detail":"not found"}, others {"detail":"<status text>"}. Status 0 clears
// it. The path need not be a route the simulator knows.
func (s *Sim) SetRouteStatus(path string, status int) {
	s.setOverride(path, func(o *routeOverride) { o.status = status })
}

// SetEmptyList makes the list route at path answer 200 with a well-formed
// empty list in its envelope ({"ok":true,"data":[]}, [], a DRF or DataTables
// page of nothing, an invoice page without next cursor).
func (s *Sim) SetEmptyList(path string, on bool) {
	s.setOverride(path, func(o *routeOverride) { o.empty = on })
}

// SetUnknownEnvelope makes the list route at path answer its records under a
// key no client knows: {"items":[...]} (the current page for invoices, the
// whole list elsewhere).
func (s *Sim) SetUnknownEnvelope(path string, on bool) {
	s.setOverride(path, func(o *routeOverride) { o.unknownEnvelope = on })
}

// SetFieldDrift makes every record of the list route at path gain the fields
// of add (values are raw JSON; a field the record has is replaced in place,
// new ones are appended in name order) and lose the fields named in remove,
// as an installation on another release does; renaming a field is a remove
// and an add. Invoices drift too; their pre-encoded pages are then bypassed.
// Beyond lists: for a journal-preview route pattern
// ("/accounts/api/journal-entries/{pk}/journal-preview/", likewise for
// payment and receipt vouchers) every line of every preview of that kind
// drifts, for one document's preview path only its lines (that path's drift
// wins over the pattern's); for "/accounts/api/balance-sheet-tree/" every
// node of the tree, at every depth. Nil add and remove clear the drift.
func (s *Sim) SetFieldDrift(path string, add map[string]json.RawMessage, remove []string) {
	var d *fieldDrift
	if len(add) > 0 || len(remove) > 0 {
		d = &fieldDrift{add: maps.Clone(add), addOrder: slices.Sorted(maps.Keys(add)), remove: map[string]bool{}}
		for _, k := range remove {
			d.remove[k] = true
		}
	}
	s.setOverride(path, func(o *routeOverride) { o.drift = d })
}

// SetListCut makes the list route at path answer only its first n records
// (after scoping) and no paging signal at all, as an ERP that applies a
// default page size without saying so: a one-list route answers a bare
// array under EnvelopeArray and {"ok":true,"data":[...]} otherwise, whatever
// the paging mode; other list routes, the invoice list included, answer
// {"ok":true,"data":[...]}. Other overrides of the route keep their
// precedence (a status or huge answer wins, an empty list stays empty, an
// unknown envelope holds the cut records, drift applies to them). 0 clears
// it.
func (s *Sim) SetListCut(path string, n int) {
	s.setOverride(path, func(o *routeOverride) { o.cut = max(n, 0) })
}

// SetHugeAnswer makes the route at path answer 200 with a valid
// {"ok":true,"data":[...]} of size bytes (at least the 21 bytes of an empty
// one), streamed with chunked transfer encoding and no Content-Length. The
// records are generated while writing, so the simulator's memory does not
// grow with size. Size 0 clears it.
func (s *Sim) SetHugeAnswer(path string, size int64) {
	s.setOverride(path, func(o *routeOverride) { o.huge = hugeAnswer{size: size} })
}

// SetHugeAnswerWithLength is SetHugeAnswer with a Content-Length header that
// announces the exact size.
func (s *Sim) SetHugeAnswerWithLength(path string, size int64) {
	s.setOverride(path, func(o *routeOverride) { o.huge = hugeAnswer{size: size, withLength: true} })
}

// answerOverride answers a data request whose route has a status or huge
// override; it reports whether it did.
func (s *Sim) answerOverride(w http.ResponseWriter, r *http.Request) bool {
	o := s.override(r.URL.Path)
	switch {
	case o.status != 0:
		writeStatus(w, o.status)
	case o.huge.size > 0:
		writeHuge(w, o.huge)
	default:
		return false
	}
	return true
}

func writeStatus(w http.ResponseWriter, status int) {
	switch status {
	case http.StatusForbidden:
		writeJSON(w, status, `{"detail":"You do not have permission to perform this action."}`)
	case http.StatusNotFound:
		notFound(w)
	default:
		b, _ := json.Marshal(map[string]string{"detail": http.StatusText(status)})
		writeBytes(w, status, b)
	}
}

// ---- field drift ---------------------------------------------------------------

type fieldDrift struct {
	add      map[string]json.RawMessage
	addOrder []string // keys of add, sorted
	remove   map[string]bool
}

// apply appends rec with the drift applied. The values of the fields kept
// are copied byte for byte, so exact money and hostile bytes survive. A
// record that is not an object is appended unchanged.
func (d *fieldDrift) apply(dst, rec []byte) []byte {
	return d.rewrite(dst, rec, false)
}

// applyTree is apply for a tree node: the nodes in its "children" array
// drift too, at every depth (unless the drift removes or replaces the
// children themselves).
func (d *fieldDrift) applyTree(dst, rec []byte) []byte {
	return d.rewrite(dst, rec, true)
}

// rewriteChildren appends the array v with every node drifted; v unchanged
// if it is not an array.
func (d *fieldDrift) rewriteChildren(dst, v []byte) []byte {
	var kids []json.RawMessage
	if json.Unmarshal(v, &kids) != nil || kids == nil {
		return append(dst, v...)
	}
	dst = append(dst, '[')
	for i, k := range kids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = d.rewrite(dst, k, true)
	}
	return append(dst, ']')
}

func (d *fieldDrift) rewrite(dst, rec []byte, deep bool) []byte {
	dec := json.NewDecoder(bytes.NewReader(rec))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return append(dst, rec...)
	}
	start := len(dst)
	dst = append(dst, '{')
	replaced := map[string]bool{}
	field := func(k string, v []byte) {
		if dst[len(dst)-1] != '{' {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		var v json.RawMessage
		if err != nil || !ok || dec.Decode(&v) != nil {
			return append(dst[:start], rec...)
		}
		if d.remove[k] {
			continue
		}
		if a, ok := d.add[k]; ok {
			v, replaced[k] = a, true
		} else if deep && k == "children" {
			v = d.rewriteChildren(nil, v)
		}
		field(k, v)
	}
	for _, k := range d.addOrder {
		if !replaced[k] {
			field(k, d.add[k])
		}
	}
	return append(dst, '}')
}

// ---- huge answers ----------------------------------------------------------------

type hugeAnswer struct {
	size       int64
	withLength bool
}

const (
	hugeHead   = `{"ok":true,"data":[`
	hugeTail   = `]}`
	hugeRecLen = 1024 // bytes of one generated record, but the last
)

var hugePad = bytes.Repeat([]byte("x"), 4096)

// hugeRecordMin is the length of generated record id with an empty pad.
func hugeRecordMin(id int64) int64 {
	return int64(len(`{"id":,"name":"bulk record","pad":""}`)) + int64(len(strconv.FormatInt(id, 10)))
}

// writeHuge streams exactly h.size bytes (or the empty list, if larger):
// records of hugeRecLen bytes, the last one stretched to fill the size.
func writeHuge(w http.ResponseWriter, h hugeAnswer) {
	size := max(h.size, int64(len(hugeHead)+len(hugeTail)))
	w.Header().Set("Content-Type", "application/json")
	if h.withLength {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok && !h.withLength {
		f.Flush() // headers out now: without a length the body is chunked
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	_, _ = bw.WriteString(hugeHead)
	rem := size - int64(len(hugeHead)+len(hugeTail))
	for id := int64(1); ; id++ {
		sep := int64(0)
		if id > 1 {
			sep = 1
		}
		if rem < sep+hugeRecordMin(id) {
			break
		}
		n := int64(hugeRecLen)
		if rem-sep-n < 1+hugeRecordMin(id+1) {
			n = rem - sep // the last record takes what is left
		}
		if sep == 1 {
			_ = bw.WriteByte(',')
		}
		if err := writeHugeRecord(bw, id, n-hugeRecordMin(id)); err != nil {
			return // client gone, or a HEAD request
		}
		rem -= sep + n
	}
	// Only when not even one record fits: JSON whitespace keeps the size.
	_, _ = bw.Write(bytes.Repeat([]byte(" "), int(rem)))
	_, _ = bw.WriteString(hugeTail)
	_ = bw.Flush()
}

func writeHugeRecord(bw *bufio.Writer, id, pad int64) error {
	_, _ = bw.WriteString(`{"id":`)
	_, _ = bw.WriteString(strconv.FormatInt(id, 10))
	_, _ = bw.WriteString(`,"name":"bulk record","pad":"`)
	for pad > 0 {
		k := min(pad, int64(len(hugePad)))
		_, _ = bw.Write(hugePad[:k])
		pad -= k
	}
	_, err := bw.WriteString(`"}`)
	return err
}
