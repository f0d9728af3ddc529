package sync

// KeepLast is the one rule for a record listed twice in one read (a page,
// a tree, an access list, a verification): the later copy is kept, in the
// place of the first. A record listed twice moved while the ERP was read,
// and the later copy is the newer. replaced, if not nil, is told of each
// earlier copy dropped. items is reused.
func KeepLast[T any](items []T, key func(T) string, replaced func(earlier T)) []T {
	at := make(map[string]int, len(items))
	out := items[:0]
	for _, it := range items {
		k := key(it)
		if i, dup := at[k]; dup {
			if replaced != nil {
				replaced(out[i])
			}
			out[i] = it
			continue
		}
		at[k] = len(out)
		out = append(out, it)
	}
	return out
}
