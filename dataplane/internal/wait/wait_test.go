package wait

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// blockingBody blocks every Read until ctx ends.
type blockingBody struct{ ctx context.Context }

func (b blockingBody) Read([]byte) (int, error) { <-b.ctx.Done(); return 0, b.ctx.Err() }
func (b blockingBody) Close() error             { return nil }

func TestTheFirstByteBoundEndsTheExchange(t *testing.T) {
	ctx, w := Start(context.Background(), 20*time.Millisecond, time.Hour)
	defer w.Stop()
	<-ctx.Done() // no Answered: the bound ends it
}

func TestAReadThatWaitsTooLongEndsTheExchange(t *testing.T) {
	ctx, w := Start(context.Background(), time.Hour, 20*time.Millisecond)
	defer w.Stop()
	w.Answered()
	if _, err := w.Body(blockingBody{ctx}).Read(make([]byte, 1)); err == nil {
		t.Fatal("a Read that waited past the idle bound returned no error")
	}
}

// Time between Reads (the reader's own pace) never counts.
func TestTheReadersPaceDoesNotCount(t *testing.T) {
	ctx, w := Start(context.Background(), time.Hour, 20*time.Millisecond)
	defer w.Stop()
	w.Answered()
	body := w.Body(io.NopCloser(strings.NewReader("ab")))
	buf := make([]byte, 1)
	body.Read(buf)
	time.Sleep(60 * time.Millisecond) // a slow reader, three idle bounds long
	if ctx.Err() != nil {
		t.Fatal("the reader's pace ended the exchange")
	}
	if n, err := body.Read(buf); n != 1 || err != nil {
		t.Fatalf("Read after a pause: %d, %v", n, err)
	}
}
