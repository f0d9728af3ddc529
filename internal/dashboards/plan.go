package dashboards

import (
	"encoding/json"
	"fmt"
)

// PlanNode is a node of a query plan, as EXPLAIN (FORMAT JSON) gives it.
type PlanNode struct {
	Node     string // "Index Only Scan", "Bitmap Index Scan", "Gather", "Append", ...
	Parallel bool   // the node shares its work with parallel workers ("Parallel Append")
	Relation string // the table, where the node names it (a bitmap index scan does not)
	Index    string // the index, where the node reads one
	Cond     string // the Index Cond: what the index is searched with
}

// PlanNodes are the nodes of the plan, from the output of EXPLAIN (FORMAT
// JSON), in plan order (each node before the nodes below it).
func PlanNodes(explainJSON []byte) ([]PlanNode, error) {
	type node struct {
		NodeType      string `json:"Node Type"`
		ParallelAware bool   `json:"Parallel Aware"`
		Relation      string `json:"Relation Name"`
		IndexName     string `json:"Index Name"`
		IndexCond     string `json:"Index Cond"`
		Plans         []json.RawMessage
	}
	var top []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal(explainJSON, &top); err != nil {
		return nil, fmt.Errorf("reading EXPLAIN (FORMAT JSON): %w", err)
	}
	var out []PlanNode
	var walk func(json.RawMessage) error
	walk = func(raw json.RawMessage) error {
		var n node
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("reading EXPLAIN (FORMAT JSON): %w", err)
		}
		out = append(out, PlanNode{Node: n.NodeType, Parallel: n.ParallelAware, Relation: n.Relation, Index: n.IndexName, Cond: n.IndexCond})
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

// IndexScans are the nodes of the plan that read an index, in plan order. It is how the tests
// and the bench tell whether a dashboard's filter reaches an index: row-level security only
// pushes leakproof operators below its policy, and a filter that does not reach the index
// reads the whole table.
func IndexScans(explainJSON []byte) ([]PlanNode, error) {
	nodes, err := PlanNodes(explainJSON)
	if err != nil {
		return nil, err
	}
	var out []PlanNode
	for _, n := range nodes {
		if n.Index != "" {
			out = append(out, n)
		}
	}
	return out, nil
}
