package bounce

import (
	"regexp"
	"strings"
	"testing"

	"github.com/genropy/postino/outcome"
)

// classifyCases has at least one case for each row of rules, in the order
// of the table; TestRules checks that every row decides one of them.
var classifyCases = []struct {
	status     string
	code       int
	diagnostic string
	typ        string
	reason     Reason
}{
	// 1. Wording that decides, over any code.
	{"5.7.1", 554, "554 5.7.1 Message rejected: virus found in attachment (Eicar-Test-Signature)", "soft", ReasonVirus},
	{"5.1.1", 550, "550 5.1.1 user's mailbox is full", "soft", ReasonMailboxFull},
	{"5.0.0", 0, "X-Unix; 67", "soft", ReasonSystem},
	{"5.7.1", 550, "550 5.7.1 Unauthenticated email from example.com is not accepted due to domain's DMARC policy", "soft", ReasonAuthentication},
	{"5.7.1", 550, "550 5.7.1 Client host rejected: cannot find your reverse hostname, [198.51.100.7]", "soft", ReasonBlocked},
	{"4.7.650", 451, "451 4.7.650 The mail server has been temporarily rate limited due to IP reputation", "soft", ReasonBlocked},
	{"4.7.0", 421, "421 4.7.0 Too many concurrent SMTP connections from this IP address", "soft", ReasonRateLimited},
	{"5.7.1", 554, "554 5.7.1 Service unavailable; Client host [198.51.100.7] blocked using zen.spamhaus.org", "soft", ReasonBlocked},
	// A temporary X.2.x status does not make "Service refusé" a disabled mailbox.
	{"4.2.1", 421, "220-laposte 421 4.2.1 Service refuse. Veuillez essayer plus tard. Service refused, please try later. LPN006_107", "soft", ReasonBlocked},
	{"5.7.1", 550, "550 5.7.1 This message is not RFC 5322 compliant, to reduce the amount of spam", "soft", ReasonPolicy},
	{"5.1.1", 550, "550 5.1.1 Message rejected as spam by Content Filtering", "soft", ReasonSpam},
	// A 5.2.0 spam refusal is no disabled mailbox.
	{"5.2.0", 550, "550 5.2.0 Mail rejete. Mail rejected. ofr_506 [506]", "soft", ReasonSpam},
	{"5.0.0", 552, "552 Message size exceeds fixed maximum message size", "soft", ReasonTooLarge},
	{"5.7.1", 554, "554 5.7.1 <x@example.com>: Relay access denied", "soft", ReasonPolicy},
	{"5.0.0", 550, "SMTP error from remote mail server after MAIL FROM:<shop@example.com>: 550 Unroutable address", "soft", ReasonBlocked},
	// Not Office 365's unknown recipient: every recipient refused.
	{"5.4.1", 550, "550 5.4.1 All recipient addresses rejected : Access denied [EXAMPLE.prod.protection.outlook.com]", "soft", ReasonBlocked},
	{"5.1.8", 553, "553 5.1.8 Domain of sender address shop@example.com does not exist", "soft", ReasonBlocked},
	{"5.2.1", 550, "550 5.2.1 <x@example.com>: this mailbox has been disabled", "hard", ReasonMailboxDisabled},
	{"5.0.0", 551, "551 User has moved; please try <new@example.com>", "hard", ReasonUserUnknown},
	{"5.2.1", 550, "550 5.2.1 <x@example.com>... User Unknown", "hard", ReasonUserUnknown},
	{"4.4.3", 0, "Host or domain name not found. Name service error for name=example.com type=MX: Host not found, try again", "soft", ReasonNetwork},
	{"5.4.4", 0, "Host or domain name not found. Name service error for name=example.invalid type=A: Host not found", "hard", ReasonDomainNotFound},

	// 2. Specific enhanced status codes.
	{"5.1.1", 550, "550 5.1.1 Requested action not taken", "hard", ReasonUserUnknown},
	{"5.1.2", 0, "", "hard", ReasonDomainNotFound},
	{"5.1.3", 501, "501 5.1.3 Bad recipient address syntax", "hard", ReasonUserUnknown},
	{"5.1.6", 550, "", "hard", ReasonUserUnknown},
	{"5.1.7", 553, "", "soft", ReasonBlocked},
	{"5.1.8", 553, "", "soft", ReasonBlocked},
	{"5.1.10", 550, "", "hard", ReasonDomainNotFound},
	{"5.2.1", 550, "", "hard", ReasonMailboxDisabled},
	{"4.2.2", 452, "", "soft", ReasonMailboxFull},
	{"5.2.3", 552, "", "soft", ReasonTooLarge},
	{"4.3.1", 452, "", "soft", ReasonSystem},
	{"5.3.2", 521, "", "hard", ReasonDomainNotFound},
	{"5.3.4", 552, "", "soft", ReasonTooLarge},
	{"4.4.1", 0, "", "soft", ReasonNetwork},
	{"4.4.2", 421, "", "soft", ReasonNetwork},
	{"4.4.3", 451, "", "soft", ReasonSystem},
	{"5.4.4", 0, "", "hard", ReasonDomainNotFound},
	{"5.4.6", 554, "", "soft", ReasonNetwork},
	{"4.4.7", 0, "", "soft", ReasonExpired},
	{"4.5.3", 452, "", "soft", ReasonRateLimited},
	{"5.7.13", 525, "", "soft", ReasonMailboxDisabled}, // x.7 is never hard
	{"5.7.20", 550, "", "soft", ReasonAuthentication},
	{"5.7.21", 550, "", "soft", ReasonAuthentication},
	{"5.7.22", 550, "", "soft", ReasonAuthentication},
	{"5.7.23", 550, "", "soft", ReasonAuthentication},
	{"5.7.24", 550, "", "soft", ReasonAuthentication},
	{"5.7.25", 550, "", "soft", ReasonBlocked},
	{"5.7.26", 550, "", "soft", ReasonAuthentication},
	{"5.7.27", 550, "", "soft", ReasonBlocked},
	{"5.7.28", 550, "", "soft", ReasonSpam},
	{"5.7.29", 550, "", "soft", ReasonAuthentication},
	{"5.7.509", 550, "550 5.7.509 Access denied, sending domain does not pass verification", "soft", ReasonAuthentication},
	{"5.7.606", 550, "550 5.7.606 Access denied", "soft", ReasonBlocked},
	{"4.7.650", 451, "", "soft", ReasonBlocked},

	// 3. Telling wording.
	{"5.7.9", 554, "554 5.7.9 Message not accepted under the receiving domain's rules: prohibited content", "soft", ReasonPolicy},
	{"", 0, "retry timeout exceeded", "soft", ReasonExpired},
	{"", 0, "connect to mx.example.com[192.0.2.1]:25: Connection refused", "soft", ReasonNetwork},
	{"", 451, "451 Temporary local problem - please try later", "soft", ReasonSystem},

	// 4. The subject of a status code alone.
	{"5.1.0", 550, "550 5.1.0 Address rejected", "hard", ReasonUserUnknown},
	{"5.2.0", 550, "", "soft", ReasonMailboxDisabled},
	{"5.3.0", 554, "", "soft", ReasonSystem},
	{"5.4.0", 550, "", "soft", ReasonNetwork},
	{"5.6.0", 554, "", "soft", ReasonPolicy},
	{"5.7.1", 550, "550 5.7.1 Delivery not authorized", "soft", ReasonPolicy},

	// 5. Bare refusals, then reply codes alone.
	{"5.0.0", 550, "550 Rejected", "soft", ReasonPolicy},
	{"", 421, "421 closing connection", "soft", ReasonSystem},
	{"", 451, "", "soft", ReasonSystem},
	{"", 452, "", "soft", ReasonSystem},
	{"", 521, "", "hard", ReasonDomainNotFound},
	{"", 551, "", "hard", ReasonUserUnknown},
	{"", 552, "", "soft", ReasonMailboxFull},
	{"", 553, "", "hard", ReasonUserUnknown},
	{"", 556, "", "hard", ReasonDomainNotFound},
	{"", 571, "", "soft", ReasonBlocked},

	// Nothing to go by.
	{"5.0.0", 550, "550 no", "soft", ReasonOther},
	{"", 0, "", "soft", ReasonOther},
	// A transient failure is soft whatever its reason.
	{"4.1.1", 450, "450 4.1.1 <x@example.com>: Recipient address rejected: unverified address", "soft", ReasonUserUnknown},
	// Success is no failure.
	{"2.0.0", 250, "250 2.0.0 Ok", "", ""},
}

func TestClassify(t *testing.T) {
	for _, c := range classifyCases {
		v, reason := Classify(Failure{Status: c.status, Code: c.code, Text: c.diagnostic})
		if string(v) != c.typ || reason != c.reason {
			t.Errorf("Classify(%q, %d, %q) = %q, %q; want %q, %q", c.status, c.code, c.diagnostic, v, reason, c.typ, c.reason)
		}
	}
}

// TestVerdict checks what replies say of the address, as the delivery
// engine reads an upstream's reply and a report's diagnostic is read:
// hard only for a permanent refusal of the address itself.
func TestVerdict(t *testing.T) {
	hard, soft := outcome.VerdictHard, outcome.VerdictSoft
	tests := []struct {
		name   string
		f      Failure
		want   outcome.Verdict
		reason Reason
	}{
		// Replies at RCPT TO.
		{"user unknown", Failure{"5.1.1", 550, "5.1.1 <x@example.net>: Recipient address rejected: User unknown in local recipient table", false}, hard, ReasonUserUnknown},
		{"no such user, no status", Failure{"", 550, "No such user here", false}, hard, ReasonUserUnknown},
		{"domain not found", Failure{"5.1.2", 550, "5.1.2 Bad destination system address", false}, hard, ReasonDomainNotFound},
		{"bad syntax", Failure{"5.1.3", 501, "5.1.3 Invalid address", false}, hard, ReasonUserUnknown},
		{"moved", Failure{"5.1.6", 551, "5.1.6 Recipient no longer on server", false}, hard, ReasonUserUnknown},
		{"null MX", Failure{"5.1.10", 556, "5.1.10 example.net does not accept mail (null MX, RFC 7505)", false}, hard, ReasonDomainNotFound},
		{"disabled", Failure{"5.2.1", 550, "5.2.1 The email account that you tried to reach is disabled.", false}, hard, ReasonMailboxDisabled},
		{"Gmail's unknown user", Failure{"5.1.1", 550, "5.1.1 The email account that you tried to reach does not exist. Please try double-checking the recipient's email address", false}, hard, ReasonUserUnknown},
		// Temporary replies: never hard, whatever they say.
		{"mailbox full 452", Failure{"4.2.2", 452, "4.2.2 The email account that you tried to reach is over quota.", false}, soft, ReasonMailboxFull},
		{"user unknown 450", Failure{"4.1.1", 450, "4.1.1 <x@example.net>: Recipient address rejected: User unknown", false}, soft, ReasonUserUnknown},
		{"user unknown 4xx without status", Failure{"", 450, "User unknown", false}, soft, ReasonUserUnknown},
		{"421 closing", Failure{"", 421, "Service not available, closing transmission channel", false}, soft, ReasonSystem},
		{"4xx code, 5.x.x status", Failure{"5.1.1", 421, "5.1.1 user unknown", false}, soft, ReasonUserUnknown},
		{"greylisting", Failure{"4.7.1", 450, "4.7.1 <x@example.net>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/", false}, soft, ReasonPolicy},
		// Security and policy, whatever they say of the address.
		{"x.7 user unknown", Failure{"5.7.1", 550, "5.7.1 <x@example.net>: Recipient address rejected: User unknown", false}, soft, ReasonUserUnknown},
		{"x.7.13 disabled", Failure{"5.7.13", 525, "5.7.13 User account disabled", false}, soft, ReasonMailboxDisabled},
		{"Office 365 blocklist", Failure{"5.7.1", 550, "5.7.1 Unfortunately, messages from [192.0.2.7] weren't sent. Please contact your Internet service provider since part of their network is on our block list (S3150).", false}, soft, ReasonBlocked},
		{"Office 365 blocklist, 5.7.606", Failure{"5.7.606", 550, "5.7.606 Access denied, banned sending IP [192.0.2.7]. To request removal from this list please visit https://sender.office.com/ and follow the directions. (AS16012609)", false}, soft, ReasonBlocked},
		{"Outlook.com blocklist, no status", Failure{"", 550, "SC-001 (BAY004-MC1F13) Unfortunately, messages from 192.0.2.7 weren't sent. Please contact your Internet service provider. You can tell them that Hotmail does not relay dynamically-assigned IP ranges.", false}, soft, ReasonBlocked},
		{"spam", Failure{"5.7.1", 554, "5.7.1 Message rejected as spam", false}, soft, ReasonSpam},
		{"rate limited", Failure{"5.7.1", 550, "5.7.1 Rate limit exceeded for this sender", false}, soft, ReasonRateLimited},
		{"mailbox full for good", Failure{"5.2.2", 552, "5.2.2 Mailbox full", false}, soft, ReasonMailboxFull},
		{"sender refused", Failure{"5.1.8", 553, "5.1.8 Sender address rejected: Domain not found", false}, soft, ReasonBlocked},
		{"nothing to go by", Failure{"", 554, "Transaction failed", false}, soft, ReasonOther},
		// A reply to MAIL FROM or to the end of DATA, after the address
		// was taken at RCPT TO, is about the message.
		{"user unknown at DATA", Failure{"5.1.1", 550, "5.1.1 User unknown", true}, soft, ReasonUserUnknown},
		{"sender's user unknown at MAIL", Failure{"5.1.1", 550, "5.1.1 <app@example.com>: Sender address rejected: User unknown", true}, soft, ReasonBlocked},
		// Success has no verdict.
		{"accepted", Failure{"2.1.5", 250, "2.1.5 Ok", false}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, reason := Classify(tt.f); got != tt.want || reason != tt.reason {
				t.Errorf("Classify(%+v) = %q, %s; want %q, %s", tt.f, got, reason, tt.want, tt.reason)
			}
		})
	}
}

// TestHardReasons checks that only the reasons that blame the address can
// be hard: no rule makes a hard verdict with any other.
func TestHardReasons(t *testing.T) {
	address := map[Reason]bool{ReasonUserUnknown: true, ReasonMailboxDisabled: true, ReasonDomainNotFound: true}
	for i, r := range rules {
		if r.hard && !address[r.reason] {
			t.Errorf("rule %d (status %q, code %d, text %v) is hard with reason %s", i, r.status, r.code, r.text, r.reason)
		}
	}
}

// TestRules checks that every row of the table decides at least one case,
// so that none is dead or hidden by an earlier one.
func TestRules(t *testing.T) {
	decided := make([]bool, len(rules))
	for _, c := range classifyCases {
		if i := classify(c.status, c.code, c.diagnostic); i >= 0 {
			decided[i] = true
		}
	}
	for i, ok := range decided {
		if !ok {
			r := rules[i]
			t.Errorf("rule %d (status %q, code %d, text %v, %s) decides no case", i, r.status, r.code, r.text, r.reason)
		}
	}
}

// TestRulesLowerCase checks that the patterns are written in lower case,
// as anyOf requires: escapes such as \S aside, an upper-case letter would
// never match.
func TestRulesLowerCase(t *testing.T) {
	escape := regexp.MustCompile(`\\[A-Za-z]`)
	for i, r := range rules {
		if r.text == nil {
			continue
		}
		if p := escape.ReplaceAllString(r.text.String(), ""); p != strings.ToLower(p) {
			t.Errorf("rule %d has upper case: %s", i, p)
		}
	}
}

func TestReplyCodes(t *testing.T) {
	tests := []struct {
		in     string
		code   int
		status string
	}{
		{"550 5.1.1 <a@example.com>: Recipient address rejected", 550, "5.1.1"},
		{"550-5.7.26 Unauthenticated email", 550, "5.7.26"},
		{"554 554 5.7.1 Service unavailable", 554, "5.7.1"},
		{"Remote host said: 552 Error: disk quota exceeded", 552, ""},
		{"Sorry, no mailbox here by that name. (#5.1.1)", 0, "5.1.1"},
		{"host 192.0.2.153 [192.0.2.153]: 550 Unknown user", 550, ""},
		{"[(0) example.com. [2606:2800:220:6d:26bf:1447:1097:aa7]:25: socket error]", 0, ""},
		{"Out: 250 2.1.5 Ok In: DATA Out: 451 4.3.0 Error: queue file write error", 451, "4.3.0"},
		{"Size (in bytes): 222", 0, ""},
		{"5.1.0 - Unknown address error 550-'5.7.1 <a@example.com>... Access denied'", 550, "5.7.1"},
	}
	for _, tt := range tests {
		code, status := replyCodes(tt.in)
		if code != tt.code || status != tt.status {
			t.Errorf("replyCodes(%q) = %d, %q; want %d, %q", tt.in, code, status, tt.code, tt.status)
		}
	}
}

func TestPreferStatus(t *testing.T) {
	tests := []struct{ status, diagnostic, want string }{
		{"5.1.1", "550 5.7.1 IP address blacklisted by recipient", "5.7.1"},
		{"5.0.0", "550 5.1.1 user unknown", "5.1.1"},
		{"4.4.7", "554 4.4.7 Message expired: unable to deliver in 840 minutes.<421 4.4.2 Connection timed out>", "4.4.2"},
		{"5.1.1", "550 5.0.0 rejected", "5.1.1"},
		{"5.0.0", "550 rejected", "5.0.0"},
		{"", "", ""},
	}
	for _, tt := range tests {
		if got := preferStatus(tt.status, tt.diagnostic); got != tt.want {
			t.Errorf("preferStatus(%q, %q) = %q, want %q", tt.status, tt.diagnostic, got, tt.want)
		}
	}
}

// TestAssessGaveUp checks what a recipient's verdict and reason become
// once the upstream gave up after temporary replies: the message will not
// arrive, but that says nothing of the address, so the verdict is soft;
// the reason says that time ran out unless the reply names a cause.
func TestAssessGaveUp(t *testing.T) {
	hard, soft := outcome.VerdictHard, outcome.VerdictSoft
	tests := []struct {
		name       string
		action     string
		status     string
		code       int
		diagnostic string
		own        string
		verdict    outcome.Verdict
		reason     Reason
	}{
		{"postfix 3.7 queue lifetime", "failed", "4.2.2", 452, "452 4.2.2 <rita@example.org>: Mailbox full", "", soft, ReasonExpired},
		{"busy server", "failed", "4.3.0", 451, "451 4.3.0 Error: queue file write error", "", soft, ReasonExpired},
		{"code only", "failed", "", 421, "421 Service not available", "", soft, ReasonExpired},
		{"no answer", "failed", "", 0, "connect to mx.example.org[192.0.2.1]:25: Connection timed out", "", soft, ReasonExpired},
		{"exim retry timeout", "failed", "", 0, "retry timeout exceeded", "", soft, ReasonExpired},
		{"exchange queue expired", "failed", "4.4.7", 550, "550 4.4.7 QUEUE.Expired; message expired", "", soft, ReasonExpired},
		{"office 365 gave up", "failed", "5.4.316", 550, "Your message wasn't delivered. Despite repeated attempts to deliver your message, " +
			"the recipient's email system refused to accept a connection from your email system.", "", soft, ReasonExpired},
		// A temporary refusal of the address is still temporary: soft,
		// and the reason says what the receiver said.
		{"unknown user deferred", "failed", "4.1.1", 450, "450 4.1.1 <x@example.org>: Recipient address rejected: User unknown", "", soft, ReasonUserUnknown},
		{"gmail NXDOMAIN after retries", "failed", "4.0.0", 0, "DNS Error: DNS type 'mx' lookup of example.jp responded with code NXDOMAIN Domain name not found: example.jp", "", soft, ReasonDomainNotFound},
		// The sender's fault stays the sender's: the address may be good.
		{"reputation", "failed", "4.7.0", 421, "421 4.7.0 [TSS04] Messages from 192.0.2.7 temporarily deferred due to user complaints", "", soft, ReasonBlocked},
		{"rate", "failed", "4.7.0", 421, "421 4.7.0 Too many concurrent SMTP connections from this IP address", "", soft, ReasonRateLimited},
		// Still being tried: soft.
		{"delayed", "delayed", "4.2.2", 452, "452 4.2.2 Mailbox full", "", soft, ReasonMailboxFull},
		// A permanent refusal is not an expiry.
		{"permanent full", "failed", "5.2.2", 552, "552 5.2.2 Mailbox full", "", soft, ReasonMailboxFull},
		{"permanent unknown", "failed", "5.1.1", 550, "550 5.1.1 <x@example.org>: Recipient address rejected: User unknown", "", hard, ReasonUserUnknown},
		// An unknown user in reply to the end of DATA, as the text block
		// of the recipient says: the receiver had taken the address.
		{"unknown at the end of DATA", "failed", "5.0.0", 550, "550 Unknown user x@example.jp",
			"<x@example.jp>: host mfsmax.example.jp[192.0.2.240] said:\n    550 Unknown user x@example.jp (in reply to end of DATA\n    command)", soft, ReasonUserUnknown},
		{"unknown after end of data", "failed", "", 550, "SMTP error from remote mail server after end of data: 550 5.1.1 User unknown", "", soft, ReasonUserUnknown},
		{"unknown at RCPT TO", "failed", "5.0.0", 550, "550 Unknown user x@example.jp",
			"<x@example.jp>: host mx.example.jp[192.0.2.240] said: 550 Unknown user x@example.jp (in reply to RCPT TO command)", hard, ReasonUserUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Recipient{Action: tt.action, Status: tt.status, SMTPCode: tt.code, Diagnostic: tt.diagnostic}
			r.assess("", tt.own)
			if r.Verdict != tt.verdict || r.Reason != tt.reason {
				t.Errorf("assess = %s, %s; want %s, %s", r.Verdict, r.Reason, tt.verdict, tt.reason)
			}
			if r.Diagnostic != tt.diagnostic {
				t.Errorf("diagnostic changed to %q", r.Diagnostic)
			}
		})
	}
}
