package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/shardcache/shardcache/cmd/internal/command"
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

// render writes v as JSON or YAML, or calls table for the table format.
// Protobuf messages use protobuf's JSON mapping, so field names are stable;
// other values use encoding/json.
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
			raw, err = protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
		} else {
			raw, err = json.Marshal(v)
		}
		if err != nil {
			return fmt.Errorf("encoding output: %w", err)
		}
		// protojson varies its spacing on purpose; indent it ourselves so
		// the output is stable for scripts and golden files.
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
