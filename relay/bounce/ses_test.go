package bounce

import (
	"strings"
	"testing"
	"time"
)

// TestSESNotification reads Amazon SES notifications of each kind, as SNS
// mails them.
func TestSESNotification(t *testing.T) {
	const mail = `"mail":{"messageId":"ses-id","headers":[{"name":"Message-ID","value":"<m-1@postino.example>"},{"name":"x-genro-mail-id","value":" <id-1> "}]}`
	keys := Keys{MailID: "id-1", MessageID: "m-1@postino.example"}
	tests := []struct {
		name     string
		body     string
		kind     Kind
		rcpts    []want
		keys     Keys
		mta      string
		feedback string
	}{
		{
			// A transient bounce with a transient code is a delay. The
			// text after the JSON is SNS's footer.
			name: "transient bounce",
			body: `{"notificationType":"Bounce","bounce":{"bounceType":"Transient","reportingMTA":"dsn; a1.amazonses.com","timestamp":"2025-03-10T15:00:00.000Z",` +
				`"bouncedRecipients":[{"emailAddress":"a@example.org","action":"failed","status":"4.2.2","diagnosticCode":"smtp; 452 4.2.2 mailbox full"},` +
				`{"emailAddress":"b@example.org","action":"failed","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"}]},` + mail + `}` +
				"\r\n\r\n--\r\nIf you wish to stop receiving notifications from this topic, unsubscribe.\r\n",
			kind: KindBounce,
			rcpts: []want{
				{"a@example.org", "delayed", "4.2.2", 452, "soft", ReasonMailboxFull},
				{"b@example.org", "failed", "5.1.1", 550, "hard", ReasonUserUnknown},
			},
			keys: keys,
			mta:  "a1.amazonses.com",
		},
		{
			// Without a status, the reply's code is the status; the
			// event-publishing form names its kind in eventType, and a
			// mail system broke its long line with "!".
			name:  "event without status",
			body:  "{\"eventType\":\"Bounce\",\"bounce\":{\"bounceType\":\"Permanent\",\"bouncedRecipients\":[{\"emailAddress\":\"c@exa!\n mple.org\",\"diagnosticCode\":\"smtp; 550 5.1.1 no such user\"}]}," + mail + "}",
			kind:  KindBounce,
			rcpts: []want{{"c@example.org", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  keys,
		},
		{
			// SNS wraps the notification in an envelope; a complaint
			// without a feedback type is abuse.
			name:     "complaint in an SNS envelope",
			body:     `{"Type":"Notification","Message":"{\"notificationType\":\"Complaint\",\"complaint\":{\"complainedRecipients\":[{\"emailAddress\":\"d@example.org\"}]}}"}`,
			kind:     KindComplaint,
			rcpts:    []want{{addr: "d@example.org"}},
			feedback: "abuse",
		},
		{
			name:     "complaint with its type",
			body:     `{"notificationType":"Complaint","complaint":{"complaintFeedbackType":"Not-Spam","complainedRecipients":[{"emailAddress":"e@example.org"}]},` + mail + `}`,
			kind:     KindComplaint,
			rcpts:    []want{{addr: "e@example.org"}},
			keys:     keys,
			feedback: "not-spam",
		},
		{
			name:  "delivery",
			body:  `{"notificationType":"Delivery","delivery":{"recipients":["f@example.org"],"smtpResponse":"250 2.0.0 OK","reportingMTA":"a2.amazonses.com"},` + mail + `}`,
			kind:  KindNotBounce,
			rcpts: []want{{addr: "f@example.org", action: "delivered", status: "2.0.0", code: 250}},
			keys:  keys,
			mta:   "a2.amazonses.com",
		},
		{
			// A kind without its object, or one the reader does not
			// know, is not read.
			name: "bounce without its object",
			body: `{"notificationType":"Bounce"}`,
			kind: KindNotBounce,
		},
		{
			name: "open event",
			body: `{"eventType":"Open","open":{"ipAddress":"192.0.2.1"}}`,
			kind: KindNotBounce,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := "From: AWS Notifications <no-reply@sns.amazonaws.com>\r\nSubject: AWS Notification Message\r\n\r\n" + tt.body
			rep, err := Parse(strings.NewReader(in), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Kind != tt.kind || rep.Keys != tt.keys || rep.ReportingMTA != tt.mta || rep.FeedbackType != tt.feedback {
				t.Errorf("Kind, Keys, ReportingMTA, FeedbackType = %q, %+v, %q, %q; want %q, %+v, %q, %q",
					rep.Kind, rep.Keys, rep.ReportingMTA, rep.FeedbackType, tt.kind, tt.keys, tt.mta, tt.feedback)
			}
			checkRecipients(t, rep.Recipients, tt.rcpts)
		})
	}
}

func TestSESBounceTimestamp(t *testing.T) {
	in := "From: no-reply@sns.amazonaws.com\r\nSubject: AWS Notification Message\r\n\r\n" +
		`{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","timestamp":"2025-03-10T15:00:00.000Z","bouncedRecipients":[{"emailAddress":"a@example.org","status":"5.1.1"}]}}`
	rep, err := Parse(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2025, 3, 10, 15, 0, 0, 0, time.UTC); !rep.ArrivalDate.Equal(want) {
		t.Errorf("ArrivalDate = %v, want %v", rep.ArrivalDate, want)
	}
}
