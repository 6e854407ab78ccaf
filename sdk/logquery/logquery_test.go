package logquery

import (
	"errors"
	"strings"
	"testing"
)

var fields = map[string]Field{
	"status": {Kind: Number}, "bytes": {Kind: Number}, "route": {Kind: Text}, "reason": {Kind: Text}, "path": {Kind: Text},
	"duration": {Kind: Duration}, "lookup": {Kind: Duration, Full: true},
}

// rec is a record for the tests: text and numbers by field, headers by
// "req."/"resp." and name.
type rec struct {
	text    map[string]string
	num     map[string]float64
	headers map[string]string
}

func (r rec) Text(f string) string    { return r.text[f] }
func (r rec) Number(f string) float64 { return r.num[f] }
func (r rec) Header(resp bool, name string) string {
	side := "req."
	if resp {
		side = "resp."
	}
	return r.headers[side+name]
}

func TestQueriesMatch(t *testing.T) {
	relayedSlow := rec{text: map[string]string{"route": "relayed", "reason": "set-cookie", "path": "/img/a.png"},
		num:     map[string]float64{"status": 503, "bytes": 10, "duration": 250, "lookup": 0.5},
		headers: map[string]string{"req.User-Agent": "curl/8.5", "resp.Content-Type": "image/png"}}
	localQuick := rec{text: map[string]string{"route": "local", "path": "/a"}, num: map[string]float64{"status": 200, "duration": 3}}
	for _, tt := range []struct {
		q           string
		slow, quick bool
		full        bool
	}{
		{`status >= 500 and route == "relayed" and duration > 100ms`, true, false, false},
		{`status>=500 and route==relayed and duration>0.1s`, true, false, false},
		{`status < 500`, false, true, false},
		{`status == 200 or reason == 'set-cookie'`, true, true, false},
		{`not (route == local)`, true, false, false},
		{`NOT route == local AND duration <= 250ms`, true, false, false},
		{`req.User-Agent ~ "^curl/"`, true, false, true},
		{`resp.Content-Type !~ "^image/"`, false, true, true},
		{`reason == ""`, false, true, false},
		{`path ~ "\\.png$" or lookup > 0ms`, true, false, true},
		{`(status == 503 or status == 200) and bytes != 10`, false, true, false},
		{``, true, true, false},
	} {
		q, err := Parse(tt.q, fields)
		if err != nil {
			t.Fatalf("%s: %v", tt.q, err)
		}
		if q.Match(relayedSlow) != tt.slow || q.Match(localQuick) != tt.quick || q.Full() != tt.full {
			t.Errorf("%s: matches the slow relayed record %t, the quick local one %t, full %t; want %t, %t, %t",
				tt.q, q.Match(relayedSlow), q.Match(localQuick), q.Full(), tt.slow, tt.quick, tt.full)
		}
	}
}

func TestQueryErrorsNameTheProblem(t *testing.T) {
	for _, tt := range []struct{ q, want string }{
		{`stauts >= 500`, `at 1: unknown field "stauts": want one of bytes, duration, lookup, path, reason, route, status, or req.HEADER or resp.HEADER`},
		{`status >= "abc"`, `at 11: status is a number: "abc" is not one`},
		{`status >= 5xx`, `at 11: status is a number: "5xx" is not one`},
		{`duration > 100`, `at 12: duration is a duration: "100" is not one; write it with a unit, such as 100ms or 1.5s`},
		{`route > relayed`, `at 7: route is text: compare it with == != ~ !~, not >`},
		{`status ~ 5`, `at 8: status is a number: compare it with == != < <= > >=, not ~`},
		{`route = relayed`, `at 7: "=" is no operator: compare with ==`},
		{`route == relayed and`, `at 21: unexpected end of the filter: want a field (status, path, reason...), req.HEADER or resp.HEADER`},
		{`route == relayed status == 200`, `at 18: unexpected "status": want and, or, or the end of the filter`},
		{`(route == relayed`, `at 18: unexpected end of the filter: want ) to close the ( at 1`},
		{`route relayed`, `at 7: unexpected "relayed" after route: want an operator (== != < <= > >= ~ !~)`},
		{`route == "relayed`, `at 10: a string that does not end (no closing ")`},
		{`path ~ "("`, "at 8: \"(\" is not a regular expression: error parsing regexp: missing closing ): `(`"},
		{`req. == x`, `at 1: "" is no header field name (req.Name, such as req.User-Agent)`},
		{`route == relayed; drop`, `at 17: unexpected ";"`},
		{strings.Repeat("not ", MaxDepth) + "route == x", `at 65: nested more than 16 deep`},
		{strings.Repeat("status == 1 or ", MaxComparisons) + "status == 2", `at 481: more than 32 comparisons`},
		{strings.Repeat(" ", MaxLength+1) + "x", `the filter is 1026 bytes long; at most 1024`},
	} {
		_, err := Parse(tt.q, fields)
		if err == nil || !errors.Is(err, ErrSyntax) || err.Error() != "logquery: "+tt.want {
			t.Errorf("%.40s:\n got %v\nwant logquery: %s", tt.q, err, tt.want)
		}
	}
}

func TestTemplates(t *testing.T) {
	r := rec{text: map[string]string{"route": "relayed", "path": "/a"}, num: map[string]float64{"status": 503, "duration": 12.5},
		headers: map[string]string{"req.User-Agent": "curl/8.5"}}
	tp, err := ParseTemplate(`{status} {route} {duration}ms {{{req.User-Agent}}} {reason}`, fields)
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.Render(r); got != `503 relayed 12.5ms {curl/8.5} -` || !tp.Full() {
		t.Fatalf("rendered %q (full %t)", got, tp.Full())
	}
	for _, tt := range []struct{ tmpl, want string }{
		{`{stauts}`, `logquery: template at 2: unknown field "stauts"`},
		{`{status`, `logquery: template at 1: a { with no } after it (write {{ for a brace)`},
		{`status}`, `logquery: template at 7: a } with no { before it (write }} for a brace)`},
	} {
		if _, err := ParseTemplate(tt.tmpl, fields); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %s", tt.tmpl, err, tt.want)
		}
	}
}
