package sdk

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/genropy/postino/outcome"
)

// fill gives every field of v a distinct value, so that a field left out of
// the wire mapping shows up as a difference.
func fill(v reflect.Value, path string) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Unix(int64(len(path)), 0).UTC()))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(path)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)))
	case reflect.Float64:
		v.SetFloat(float64(len(path)) / 1000)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	default:
		panic("fill: add " + v.Kind().String())
	}
}

func TestEventWireRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func() *Event
	}{
		{"every field set", func() *Event {
			e := &Event{}
			fill(reflect.ValueOf(e).Elem(), "e")
			return e
		}},
		{"no bounce, no PEC, no recipients", func() *Event {
			// Recipients stay an empty list, so that the JSON has [] and not null.
			return &Event{EventID: "ev", MessageID: "m", Outcome: "SENT", At: "2026-11-21T00:00:00Z", DeliveryAttempt: 1, Recipients: []Recipient{}}
		}},
		{"SUPPRESSED: the stream, suppressed recipients", func() *Event {
			return &Event{EventID: "ev", MessageID: "m", Outcome: "SUPPRESSED", PreviousStatus: "INTAKING", At: "2026-11-21T00:00:00Z",
				DeliveryAttempt: 1, Stream: "news", Recipients: []Recipient{{Address: "user@example.net", Status: outcome.RecipientSuppressed,
					Text: "suppressed (unsubscribe) since 2026-11-20"}}}
		}},
		{"UNSUBSCRIBED: the unsubscribe", func() *Event {
			return &Event{EventID: "ev", MessageID: "m", Outcome: "UNSUBSCRIBED", At: "2026-11-21T00:00:00Z", DeliveryAttempt: 1,
				Recipients: []Recipient{}, Unsubscribe: &Unsubscribe{Recipient: "user@example.net", Stream: "news", Via: "https",
					At: time.Date(2026, 11, 21, 0, 0, 0, 123456789, time.UTC)}}
		}},
		{"BATCH-SUSPENDED: the counts and thresholds", func() *Event {
			return &Event{EventID: "ev", MessageID: "m", Outcome: "BATCH-SUSPENDED", At: "2026-11-21T00:00:00Z", DeliveryAttempt: 1,
				Batch: "newsletter-47", Recipients: []Recipient{}, BatchSuspension: &BatchSuspension{Batch: "newsletter-47",
					Reason: "hard verdicts 6.0% (12 of 200) over the 5.0% threshold", Sent: 200, Hard: 12, Complaints: 1, MinSent: 200,
					MaxHardRate: 0.05, MaxComplaintRate: 0.003}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.make()
			if got := FromProto(ToProto(want)); !reflect.DeepEqual(got, want) {
				t.Errorf("lost on the wire:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
