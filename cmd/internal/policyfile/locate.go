package policyfile

import (
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Line is the line of data where the field path (as the control plane
// names a refused field: "hosts[0]", "bypass[1].methods") of the policy
// named policy is written, or the policy's own line when the field is
// not in the file; 0 when the policy is not in it either.
func Line(data []byte, policy, field string) int {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	items := []*yaml.Node{doc.Content[0]}
	if doc.Content[0].Kind == yaml.SequenceNode {
		items = doc.Content[0].Content
	}
	for _, item := range items {
		if item.Kind != yaml.MappingNode || policyName(item) != policy {
			continue
		}
		n := item
		for _, seg := range pathSegment.FindAllStringSubmatch(field, -1) {
			next := value(n, seg[1])
			if next == nil {
				break
			}
			n = next
			if seg[2] != "" {
				i, _ := strconv.Atoi(seg[2])
				if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
					break
				}
				n = n.Content[i]
			}
		}
		return n.Line
	}
	return 0
}

// pathSegment is one step of a field path: a name and an optional index.
var pathSegment = regexp.MustCompile(`([a-z_]+)(?:\[(\d+)\])?`)

// value is the value of key in mapping m (by proto or JSON name), or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i].Value; k == key || snake(k) == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// snake is a JSON name's proto name: pathPrefix is path_prefix.
func snake(s string) string {
	out := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			out = append(out, '_', c+'a'-'A')
		} else {
			out = append(out, c)
		}
	}
	return string(out)
}
