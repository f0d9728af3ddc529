package dashboards

import (
	"encoding/json"
	"fmt"
)

// IndexScan is a node of a query plan that reads an index.
type IndexScan struct {
	Node     string // "Index Scan", "Index Only Scan", "Bitmap Index Scan"
	Relation string // the table, where the node names it (a bitmap index scan does not)
	Index    string
	Cond     string // the Index Cond: what the index is searched with
}

// IndexScans are the nodes of the plan that read an index, from the output of
// EXPLAIN (FORMAT JSON), in plan order. It is how the tests and the bench tell whether a
// dashboard's filter reaches an index: row-level security only pushes leakproof operators
// below its policy, and a filter that does not reach the index reads the whole table.
func IndexScans(explainJSON []byte) ([]IndexScan, error) {
	type node struct {
		NodeType  string `json:"Node Type"`
		Relation  string `json:"Relation Name"`
		IndexName string `json:"Index Name"`
		IndexCond string `json:"Index Cond"`
		Plans     []json.RawMessage
	}
	var top []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal(explainJSON, &top); err != nil {
		return nil, fmt.Errorf("reading EXPLAIN (FORMAT JSON): %w", err)
	}
	var out []IndexScan
	var walk func(json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		var n node
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("reading EXPLAIN (FORMAT JSON): %w", err)
		}
		if n.IndexName != "" {
			out = append(out, IndexScan{Node: n.NodeType, Relation: n.Relation, Index: n.IndexName, Cond: n.IndexCond})
		}
		for _, p := range n.Plans {
			if err := walk(p); err != nil {
				return err
			}
		}
		return nil
	}
	for _, t := range top {
		if err := walk(t.Plan); err != nil {
			return nil, err
		}
	}
	return out, nil
}
