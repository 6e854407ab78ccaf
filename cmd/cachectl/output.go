package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/shardcache/shardcache/cmd/internal/command"
	"github.com/shardcache/shardcache/sdk/redact"
)

// outputFormats are the values of -o.
var outputFormats = []string{"table", "wide", "json", "yaml"}

// checkFormat refuses an unknown -o value before any call is made.
func checkFormat(format string) error {
	if slices.Contains(outputFormats, format) {
		return nil
	}
	return command.Usage(fmt.Errorf("-o %q: want table, wide, json or yaml", format))
}

// shown is text a node sent (its id, a hot key, its version, a reason, an
// inspection's fields) as a table shows it: a member advertises its own ops
// listener, so its controls, tabs and line breaks are escaped
// (redact.Printable), so that it neither rewrites the operator's terminal
// nor makes a cell or a row of its own, passing for another node's. JSON
// and YAML keep it as sent.
func shown(s string) string { return redact.Printable(s) }

// render writes v as JSON or YAML, or calls table for the table format.
// Every command's JSON has one style: snake_case names (a protobuf
// message's proto field names), numbers as numbers (64-bit ones too),
// every field present, and empty lists as [] and empty maps as {}.
func render(w io.Writer, format string, v any, table func(*tabwriter.Writer)) error {
	switch format {
	case "table", "wide":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	case "json", "yaml":
		var raw []byte
		var err error
		if msg, ok := v.(proto.Message); ok {
			raw, err = json.Marshal(messageJSON(msg.ProtoReflect()))
		} else {
			raw, err = json.Marshal(v)
		}
		if err != nil {
			return fmt.Errorf("encoding output: %w", err)
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("encoding output: %w", err)
		}
		b := buf.Bytes()
		if format == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return fmt.Errorf("encoding output: %w", err)
			}
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return checkFormat(format)
}

// messageJSON is msg as encoding/json writes it in the one style: every
// field by its proto name; 64-bit integers as numbers; enums by name;
// timestamps in RFC 3339; durations as Go writes them (1m30s); unset
// messages null, lists [] and maps {} when empty.
func messageJSON(msg protoreflect.Message) any {
	switch m := msg.Interface().(type) {
	case *timestamppb.Timestamp:
		return m.AsTime().UTC().Format(time.RFC3339Nano)
	case *durationpb.Duration:
		return m.AsDuration().String()
	}
	out := map[string]any{}
	fields := msg.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		v := msg.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			items := make([]any, l.Len())
			for j := range l.Len() {
				items[j] = scalarJSON(fd, l.Get(j))
			}
			out[name] = items
		case fd.IsMap():
			m := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				m[k.String()] = scalarJSON(fd.MapValue(), mv)
				return true
			})
			out[name] = m
		case fd.Kind() == protoreflect.MessageKind && !msg.Has(fd):
			out[name] = nil
		default:
			out[name] = scalarJSON(fd, v)
		}
	}
	return out
}

func scalarJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return messageJSON(v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	case protoreflect.BytesKind:
		return v.Bytes()
	}
	return v.Interface() // bool, string, the integers and floats as numbers
}
