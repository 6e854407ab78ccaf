// Package policyfile reads and writes cache policies in the file format
// `cachectl policy apply -f` takes and `cachectl policy get` prints: YAML
// (or JSON) with the fields of shardcache.v1.CachePolicy by their proto
// names, where
//
//   - mode is sharded, local, redirect or bypass (CACHE_MODE_SHARDED too),
//   - durations are Go durations ("90s", "10m", "1h30m") or seconds,
//   - slice_size, max_object_size and a registry's bandwidth (a second)
//     are sizes with a unit ("8MiB", "10GB",
//     "512mib", "10g") or bytes,
//   - excluded_statuses entries are "404" or "300-399",
//   - a status_ttls entry is {status: "200-299", ttl: 10m}.
//
// A refused file names the line, the field and what is allowed, for
// every mistake at once. What Marshal writes, Parse reads back unchanged.
package policyfile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// ErrInvalid wraps every refusal of a file.
var ErrInvalid = errors.New("policyfile: invalid policy file")

// maxErrors bounds the mistakes one refusal lists.
const maxErrors = 20

// sizeFields take sizes with units; statusFields status ranges.
var sizeFields = []string{"slice_size", "max_object_size", "bandwidth"}

// Error is a refused file: one line per mistake, each naming its line.
type Error struct {
	// Problems are "line N: field: what is wrong; what is allowed".
	Problems []string
}

func (e *Error) Error() string {
	return "invalid policy file:\n  " + strings.Join(e.Problems, "\n  ")
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

// parser collects the mistakes of one file.
type parser struct {
	problems  []string
	truncated bool
	policy    string // the name of the policy being read, for messages
}

func (p *parser) bad(n *yaml.Node, field, format string, args ...any) {
	if len(p.problems) >= maxErrors {
		p.truncated = true
		return
	}
	msg := fmt.Sprintf(format, args...)
	switch {
	case field != "" && strings.HasPrefix(msg, `"`):
		msg = field + " " + msg // mode "shardd": want ...
	case field != "":
		msg = field + ": " + msg
	}
	if p.policy != "" {
		msg = fmt.Sprintf("policy %q: %s", p.policy, msg)
	}
	p.problems = append(p.problems, fmt.Sprintf("line %d: %s", n.Line, msg))
}

// Parse reads one policy, or a list of them, from YAML or JSON.
func Parse(data []byte) ([]*pb.CachePolicy, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{Problems: []string{strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{Problems: []string{"no policy in the file"}}
	}
	root := doc.Content[0]
	items := []*yaml.Node{root}
	if root.Kind == yaml.SequenceNode {
		items = root.Content
	}
	p := &parser{}
	var out []*pb.CachePolicy
	for _, item := range items {
		if item.Kind != yaml.MappingNode {
			p.bad(item, "", "want a policy (a mapping of fields), got %s", describe(item))
			continue
		}
		msg := &pb.CachePolicy{}
		p.policy = policyName(item)
		p.message(item, msg.ProtoReflect(), "")
		msg.Revision = 0 // the stored record's revision, not the file's
		out = append(out, msg)
	}
	if len(out) == 0 && len(p.problems) == 0 {
		p.problems = append(p.problems, "no policy in the file")
	}
	if p.truncated {
		p.problems = append(p.problems, fmt.Sprintf("(only the first %d mistakes are listed)", maxErrors))
	}
	if len(p.problems) > 0 {
		return nil, &Error{Problems: p.problems}
	}
	return out, nil
}

// policyName is the name the mapping gives, for messages.
func policyName(m *yaml.Node) string {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "name" {
			return m.Content[i+1].Value
		}
	}
	return ""
}

// message fills msg from mapping node m; path prefixes field names in
// messages ("bypass[0].methods").
func (p *parser) message(m *yaml.Node, msg protoreflect.Message, path string) {
	fields := msg.Descriptor().Fields()
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		fd := fields.ByName(protoreflect.Name(k.Value))
		if fd == nil {
			fd = fields.ByJSONName(k.Value)
		}
		name := k.Value
		if path != "" {
			name = path + "." + k.Value
		}
		if fd == nil {
			p.unknownField(k, name, msg.Descriptor())
			continue
		}
		if seen[string(fd.Name())] {
			p.bad(k, name, "given twice")
			continue
		}
		seen[string(fd.Name())] = true
		if v.Tag == "!!null" {
			continue // unset
		}
		if fd.IsList() {
			p.list(v, msg, fd, name)
			continue
		}
		if val, ok := p.value(v, fd, name); ok {
			msg.Set(fd, val)
		}
	}
}

// unknownField names the closest field, or every field.
func (p *parser) unknownField(k *yaml.Node, name string, md protoreflect.MessageDescriptor) {
	var names []string
	for i := range md.Fields().Len() {
		if n := string(md.Fields().Get(i).Name()); n != "revision" {
			names = append(names, n)
		}
	}
	if best, d := closest(k.Value, names); d <= max(2, len(k.Value)/3) {
		p.bad(k, "", "unknown field %q: did you mean %s?", name, best)
		return
	}
	p.bad(k, "", "unknown field %q: want one of %s", name, strings.Join(names, ", "))
}

// list fills the repeated field fd from sequence node v.
func (p *parser) list(v *yaml.Node, msg protoreflect.Message, fd protoreflect.FieldDescriptor, name string) {
	if v.Kind != yaml.SequenceNode {
		p.bad(v, name, "want a list, got %s", describe(v))
		return
	}
	l := msg.Mutable(fd).List()
	for j, item := range v.Content {
		iname := fmt.Sprintf("%s[%d]", name, j)
		if val, ok := p.value(item, fd, iname); ok {
			l.Append(val)
		}
	}
}

// value converts node v to the value of field fd (an element, for a list).
func (p *parser) value(v *yaml.Node, fd protoreflect.FieldDescriptor, name string) (protoreflect.Value, bool) {
	field := string(fd.Name())
	if fd.Kind() == protoreflect.MessageKind {
		return p.messageValue(v, fd, name)
	}
	if v.Kind != yaml.ScalarNode {
		p.bad(v, name, "want %s, got %s", kindWord(fd), describe(v))
		return protoreflect.Value{}, false
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(v.Value), true
	case protoreflect.BoolKind:
		switch strings.ToLower(v.Value) {
		case "true":
			return protoreflect.ValueOfBool(true), true
		case "false":
			return protoreflect.ValueOfBool(false), true
		}
		p.bad(v, name, "%q: want true or false", v.Value)
	case protoreflect.EnumKind:
		return p.enumValue(v, fd, name)
	case protoreflect.Int64Kind, protoreflect.Int32Kind:
		if slices.Contains(sizeFields, field) {
			n, err := units.ParseBytes(v.Value)
			if err != nil {
				p.bad(v, name, "%q: want a size such as 8MiB, 10GB or 1048576 (units: %s)", v.Value, units.Allowed)
				return protoreflect.Value{}, false
			}
			return protoreflect.ValueOfInt64(n), true
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			p.bad(v, name, "%q: want a whole number", v.Value)
			return protoreflect.Value{}, false
		}
		if fd.Kind() == protoreflect.Int32Kind {
			return protoreflect.ValueOfInt32(int32(n)), true
		}
		return protoreflect.ValueOfInt64(n), true
	case protoreflect.Uint32Kind:
		n, err := strconv.ParseUint(v.Value, 10, 32)
		if err != nil {
			p.bad(v, name, "%q: want a whole number of zero or more", v.Value)
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfUint32(uint32(n)), true
	default:
		p.bad(v, name, "this field cannot be set in a policy file")
	}
	return protoreflect.Value{}, false
}

// enumValue reads an enum by its short name (sharded) or full name
// (CACHE_MODE_SHARDED), in any case.
func (p *parser) enumValue(v *yaml.Node, fd protoreflect.FieldDescriptor, name string) (protoreflect.Value, bool) {
	ed := fd.Enum()
	prefix := enumPrefix(ed)
	want := strings.ToUpper(v.Value)
	var allowed []string
	for i := range ed.Values().Len() {
		ev := ed.Values().Get(i)
		short := strings.TrimPrefix(string(ev.Name()), prefix)
		if short == "UNSPECIFIED" {
			continue
		}
		allowed = append(allowed, strings.ToLower(short))
		if want == short || want == string(ev.Name()) {
			return protoreflect.ValueOfEnum(ev.Number()), true
		}
	}
	p.bad(v, name, "%q: want %s", v.Value, orList(allowed))
	return protoreflect.Value{}, false
}

// messageValue reads the message-typed fields: durations, status ranges,
// status TTLs and bypass rules.
func (p *parser) messageValue(v *yaml.Node, fd protoreflect.FieldDescriptor, name string) (protoreflect.Value, bool) {
	switch fd.Message().FullName() {
	case "google.protobuf.Duration":
		d, ok := p.duration(v, name)
		if !ok {
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect()), true
	case "shardcache.v1.StatusRange":
		if v.Kind == yaml.ScalarNode {
			from, to, ok := p.statusRange(v, name)
			return protoreflect.ValueOfMessage((&pb.StatusRange{From: from, To: to}).ProtoReflect()), ok
		}
	case "shardcache.v1.StatusTTL":
		if v.Kind == yaml.MappingNode {
			return p.statusTTL(v, name)
		}
	}
	if v.Kind != yaml.MappingNode {
		p.bad(v, name, "want %s, got %s", kindWord(fd), describe(v))
		return protoreflect.Value{}, false
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(fd.Message().FullName())
	if err != nil {
		p.bad(v, name, "this field cannot be set in a policy file")
		return protoreflect.Value{}, false
	}
	msg := mt.New()
	p.message(v, msg, name)
	return protoreflect.ValueOfMessage(msg), true
}

// statusTTL reads {status: "200-299", ttl: 10m}, or the proto fields.
func (p *parser) statusTTL(v *yaml.Node, name string) (protoreflect.Value, bool) {
	st := &pb.StatusTTL{}
	rest := &yaml.Node{Kind: yaml.MappingNode, Line: v.Line}
	ok := true
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		if k.Value == "status" {
			from, to, good := p.statusRange(val, name+".status")
			st.StatusFrom, st.StatusTo, ok = from, to, ok && good
			continue
		}
		rest.Content = append(rest.Content, k, val)
	}
	p.message(rest, st.ProtoReflect(), name)
	return protoreflect.ValueOfMessage(st.ProtoReflect()), ok
}

// duration reads "90s", "1h30m", or a number of seconds.
func (p *parser) duration(v *yaml.Node, name string) (time.Duration, bool) {
	if v.Kind == yaml.ScalarNode {
		if d, err := time.ParseDuration(v.Value); err == nil {
			return d, true
		}
		if s, err := strconv.ParseFloat(v.Value, 64); err == nil && v.Tag != "!!str" {
			return time.Duration(s * float64(time.Second)), true
		}
	}
	p.bad(v, name, "%q: want a duration such as 90s, 10m or 1h30m (units ns, us, ms, s, m, h)", v.Value)
	return 0, false
}

// statusRange reads 404, "404" or "300-399".
func (p *parser) statusRange(v *yaml.Node, name string) (uint32, uint32, bool) {
	a, b, isRange := strings.Cut(strings.TrimSpace(v.Value), "-")
	from, err := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	to := from
	if err == nil && isRange {
		to, err = strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	}
	if err != nil || v.Kind != yaml.ScalarNode {
		p.bad(v, name, "%q: want a status like 404 or a range like 300-399", v.Value)
		return 0, 0, false
	}
	return uint32(from), uint32(to), true
}

// enumPrefix is the prefix every value name of ed shares ("CACHE_MODE_").
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	first := string(ed.Values().Get(0).Name())
	return strings.TrimSuffix(first, "UNSPECIFIED")
}

func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func kindWord(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Duration":
			return "a duration"
		case "shardcache.v1.StatusRange":
			return "a status or a status range"
		}
		return "a mapping of " + string(fd.Message().Name()) + " fields"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.StringKind:
		return "a string"
	}
	return "a value"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// closest returns the name nearest to s by edit distance.
func closest(s string, names []string) (string, int) {
	best, bestD := "", 1<<30
	for _, n := range names {
		if d := distance(strings.ToLower(s), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best, bestD
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
