package model

// Order is how the ids of a list came, as a read of it showed them:
// strictly ascending, strictly descending, or neither. A list whose reads
// keep a strict order can be followed (only what is new read), and its
// deletions can be judged page by page.
type Order string

const (
	// OrderUnknown: fewer than two ids were read.
	OrderUnknown    Order = ""
	OrderAscending  Order = "ascending"
	OrderDescending Order = "descending"
	OrderUnordered  Order = "unordered"
)

// Strict reports whether the ids come in one strict order.
func (o Order) Strict() bool { return o == OrderAscending || o == OrderDescending }

// ParseOrder reads an order as stored; what it does not know (a word of
// an earlier release, such as "unknown") is OrderUnknown.
func ParseOrder(s string) Order {
	switch o := Order(s); o {
	case OrderAscending, OrderDescending, OrderUnordered:
		return o
	}
	return OrderUnknown
}
