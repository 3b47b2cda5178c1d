package bounce

import (
	"regexp"
	"strings"
)

// Subjects of automatic replies, in the languages met most:
// autoReplySubjectRe's say so outright; vacationSubjectRe's might be a
// person's, and count only with a header that marks automatic mail.
var (
	autoReplySubjectRe = regexp.MustCompile(`(?i)^\s*(?:` +
		`auto(?:matic|matische)?[ -]?(?:reply|response|respons|answer|antwort|réponse|risposta|respuesta)` +
		`|auto:|autoreply|autoresponder|out of (?:the )?office|\booo\b|abwesenheitsnotiz` +
		`|risposta automatica|réponse automatique|respuesta automática|resposta automática|fuera de la oficina|fuori ufficio` +
		`|自動応答|自动回复|自動返信)`)
	vacationSubjectRe = regexp.MustCompile(`(?i)^\s*(?:away|on vacation|vacation|on leave|absence|absent)\b`)
)

// autoReply reads an RFC 3834 automatic reply. Bounces carry some of the
// same marks (Exim writes Auto-Submitted: auto-replied on its bounces), so
// a message that looks like a bounce is left to the bounce reader unless
// late is set, when the bounce reader has found nothing.
func (m *msg) autoReply(rep *Report, late bool) bool {
	if !m.isAutoReply() {
		return false
	}
	if !late && (daemonFromRe.MatchString(m.header.Get("From")) || bounceSubjectRe.MatchString(m.subject)) {
		return false
	}
	rep.Kind = KindAutoReply
	// The one who is away is the recipient the reply is about.
	for _, a := range headerAddresses(m.header.Get("From")) {
		rep.Recipients = append(rep.Recipients, Recipient{FinalRecipient: a})
	}
	// The reply names the message it answers.
	if id := messageID(m.header.Get("In-Reply-To")); id != "" {
		rep.Keys.MessageID = id
	}
	return true
}

func (m *msg) isAutoReply() bool {
	h := m.header
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Auto-Submitted"))), "auto-replied") {
		return true
	}
	for _, k := range []string{"X-Autoreply", "X-Autorespond", "X-Auto-Reply", "X-Autoresponder", "X-Vacation"} {
		if h.Has(k) {
			return true
		}
	}
	precedence := strings.ToLower(strings.TrimSpace(h.Get("Precedence")))
	if precedence == "auto_reply" || precedence == "auto-reply" {
		return true
	}
	if autoReplySubjectRe.MatchString(m.subject) {
		return true
	}
	automatic := precedence == "bulk" || precedence == "junk" || h.Has("X-Auto-Response-Suppress") || h.Has("Auto-Submitted")
	return automatic && vacationSubjectRe.MatchString(m.subject)
}
