package policyfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/shardcache/shardcache/cmd/internal/units"
	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
)

// Marshal writes policies in the file format, YAML or (format "json")
// JSON: one policy as a mapping, several as a list. Only the fields that
// are set are written, in the order of the proto; the revision is a
// comment, which apply ignores.
func Marshal(ps []*pb.CachePolicy, format string) ([]byte, error) {
	nodes := make([]*yaml.Node, len(ps))
	for i, p := range ps {
		nodes[i] = policyNode(p)
	}
	root := &yaml.Node{Kind: yaml.SequenceNode, Content: nodes}
	if len(nodes) == 1 {
		root = nodes[0]
	}
	if format == "json" {
		var v any
		if err := root.Decode(&v); err != nil {
			return nil, fmt.Errorf("encoding policies: %w", err)
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encoding policies: %w", err)
		}
		return append(b, '\n'), nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encoding policies: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding policies: %w", err)
	}
	return buf.Bytes(), nil
}

func policyNode(p *pb.CachePolicy) *yaml.Node {
	n := messageNode(p.ProtoReflect())
	if p.GetRevision() != 0 {
		n.HeadComment = fmt.Sprintf("revision %d (the control plane's; apply ignores it)", p.GetRevision())
	}
	return n
}

func scalar(tag, v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }

// messageNode writes msg's set fields in proto order, without revision.
func messageNode(msg protoreflect.Message) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	fields := msg.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "revision" || !msg.Has(fd) {
			continue
		}
		var v *yaml.Node
		if fd.IsList() {
			v = &yaml.Node{Kind: yaml.SequenceNode}
			l := msg.Get(fd).List()
			for j := range l.Len() {
				v.Content = append(v.Content, valueNode(fd, l.Get(j)))
			}
		} else {
			v = valueNode(fd, msg.Get(fd))
		}
		n.Content = append(n.Content, scalar("!!str", string(fd.Name())), v)
	}
	return n
}

func valueNode(fd protoreflect.FieldDescriptor, v protoreflect.Value) *yaml.Node {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return scalar("!!str", v.String())
	case protoreflect.BoolKind:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case protoreflect.EnumKind:
		ev := fd.Enum().Values().ByNumber(v.Enum())
		if ev == nil {
			return scalar("!!int", strconv.Itoa(int(v.Enum())))
		}
		return scalar("!!str", strings.ToLower(strings.TrimPrefix(string(ev.Name()), enumPrefix(fd.Enum()))))
	case protoreflect.Int64Kind, protoreflect.Int32Kind:
		if slices.Contains(sizeFields, string(fd.Name())) {
			return scalar("!!str", units.Exact(v.Int()))
		}
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return scalar("!!int", strconv.FormatUint(v.Uint(), 10))
	case protoreflect.MessageKind:
		switch m := v.Message().Interface().(type) {
		case *durationpb.Duration:
			return scalar("!!str", FormatDuration(m.AsDuration()))
		case *pb.StatusRange:
			return scalar("!!str", statusText(m.GetFrom(), m.GetTo()))
		case *pb.StatusTTL:
			n := &yaml.Node{Kind: yaml.MappingNode}
			n.Content = append(n.Content, scalar("!!str", "status"), scalar("!!str", statusText(m.GetStatusFrom(), m.GetStatusTo())))
			if m.Ttl != nil {
				n.Content = append(n.Content, scalar("!!str", "ttl"), scalar("!!str", FormatDuration(m.GetTtl().AsDuration())))
			}
			return n
		}
		return messageNode(v.Message())
	}
	return scalar("!!str", v.String())
}

func statusText(from, to uint32) string {
	if from == to {
		return strconv.FormatUint(uint64(from), 10)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

// FormatDuration is d as time.ParseDuration reads it, without zero
// units: 1h, 1h30m, 90s as 1m30s, 250ms.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
