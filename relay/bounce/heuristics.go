package bounce

import (
	"github.com/genropy/postino/internal/text"
	"regexp"
	"strings"
)

// Bounces written without RFC 3464 are read from their wording and layout,
// which MTAs share more than their authors planned: an explanation, then
// each failed recipient with what the remote server said, then the
// returned message after a marker line. The patterns below are keyed on
// those shapes, not on any one server.

// returnedMarkerRe matches the line after which an MTA quotes the returned
// message: "------ This is a copy of the message, including all the
// headers. ------" (Exim), "--- Below this line is a copy of the message."
// (qmail), "----- Original message -----" (Gmail), "Original message
// follows." and the like.
var returnedMarkerRe = regexp.MustCompile(`(?i)^[\s\-=*_#>|]*(?:` +
	`(?:this is a |here is a |below (?:this line )?is a |enclosed is a |attached is a |included is a |following is a )?copy of (?:the |your )?(?:original |returned |undelivered )?(?:message|mail|e-?mail)` +
	`|below this line is a copy` +
	`|(?:the |your )?original (?:message|mail|e-?mail)(?: headers?)?(?:\s+(?:follows?|is following|is below|below|attached|header follows))?\s*[-:.=]*\s*$` +
	`|(?:the |your )?original (?:message|mail) follows` +
	`|(?:the )?(?:returned|undelivered|unsent|rejected) (?:message|mail)(?: follows| below)?\s*[-:.=]*\s*$` +
	`|unsent message follows` +
	`|(?:the )?message headers? follows?` +
	`|(?:the )?headers? of (?:the |your )?original (?:message|mail)` +
	`|original message headers|intestazioni (?:del )?messaggio originale|ursprüngliche nachrichtenkopfzeilen|en-têtes du message d'origine` +
	`)`)

// headerLineRe matches a header line of a quoted message.
var headerLineRe = regexp.MustCompile(`^(?i:Received|Return-Path|DKIM-Signature|DomainKey-Signature|Message-I[Dd]|From|To|Cc|Subject|Date|MIME-Version|Content-Type|Content-Transfer-Encoding|Delivered-To|Authentication-Results|Reply-To|Sender|X-[A-Za-z0-9-]+|ARC-[A-Za-z-]+|User-Agent|References|In-Reply-To):[ \t]`)

// decorationRe matches a line drawn only to separate sections.
var decorationRe = regexp.MustCompile(`^[\s\-=*_#~+]+$`)

// returnedStart returns the index of the first line of the returned
// message in lines, or len(lines).
func returnedStart(lines []string) int {
	for i, l := range lines {
		if returnedMarkerRe.MatchString(l) {
			return i
		}
		// A header block after a blank or drawn line: three lines of
		// fields and their continuations, or two that start with a field
		// only a message has.
		if (i == 0 || strings.TrimSpace(lines[i-1]) == "" || decorationRe.MatchString(lines[i-1])) && headerLineRe.MatchString(l) {
			n := 1
			for n < 3 && i+n < len(lines) && (headerLineRe.MatchString(lines[i+n]) || strings.HasPrefix(lines[i+n], " ") || strings.HasPrefix(lines[i+n], "\t")) {
				n++
			}
			if n == 3 || n == 2 && traceLineRe.MatchString(l) {
				return i
			}
		}
	}
	return len(lines)
}

// traceLineRe matches the fields that start the header of a message.
var traceLineRe = regexp.MustCompile(`^(?i:Received|Return-Path|DKIM-Signature|Delivered-To|Authentication-Results|X-[A-Za-z0-9-]+):`)

// Where recipients stand in a bounce's text.
var (
	// A line that starts with the address: "<a@b>:", "  a@b",
	// "<a@b>: host x said: ...", "a@b on Thu, 29 Apr", "a@b... User unknown".
	leadAddrRe = regexp.MustCompile(`^(?:[*•·>]\s*|--?\s+|\d{1,2}[.)]\s+)?(?:(?i:rfc822|rcpt to|to);\s*)?[<"']?(` + addrPattern + `)[>"']?(?:$|[\s:;,.(\[]|\.\.\.)`)

	// Sendmail's result of a recipient: "550 <a@b>... User unknown".
	sendmailAddrRe = regexp.MustCompile(`^([245]\d\d) <(` + addrPattern + `)>\.\.\.\s*(.*)$`)

	// A short label and the address ending the line: "Unknown user:
	// a@b", "Failed Recipient: <a@b>", "Could not be delivered to: <a@b>".
	labelAddrRe = regexp.MustCompile(`^([^@<>]{1,64}?)\s*[:：]\s*(?:(?i:rfc822);\s*)?[<"']?(` + addrPattern + `)[>"']?(?:\s*[.,;]?\s*$|[.,;]\s+(.*)$)`)

	// A phrase that names the recipient: "delivering your mail to <a@b>",
	// "Your message to a@b couldn't be delivered".
	phraseAddrRe = regexp.MustCompile(`(?i)(?:(?:deliver\w*|sent|send|sending|message|mail|e-?mail|forward\w*|relay\w*|reach)\s+(?:\S+\s+){0,4}?to|recipients?\b[^@:]{0,60}|rcpt to|addressed to|member of this (?:mailing )?list)\s*:?\s*[<"']?(` + addrPattern + `)[>"']?`)

	// A line that starts a new context in a transcript: what follows
	// it belongs to the next recipient, not to the one before.
	contextRe = regexp.MustCompile(`(?i)^\s*(?:while talking to|[245]\d\d [^\s<@]+ \((?:e?smtp|local|uucp)\)\.\.\.)`)

	// Labels of quoted header fields, which name the sender or the
	// original recipients, never the failed one.
	headerLabelRe = regexp.MustCompile(`(?i)^\s*(?:to|from|cc|bcc|reply-to|sender|return-path|delivered-to|envelope-to|errors-to|x-[\w-]+|resent-[\w-]+|received|message-id|in-reply-to|references|subject|disposition-notification-to|original-mail-from|mail from|sent by|sender address|from address|reporting-mta|list-[\w-]+)$`)

	// Labels and wording of the lines that give someone to ask or write
	// to: contact lines ("System Contact: postmaster@..."), help prose,
	// list footers. The address on them is never a failed recipient.
	helpLabelRe = regexp.MustCompile(`(?i)contact|postmaster|admin|support|help|abuse|webmaster|hostmaster|questions|assistance|owner|unsubscribe|manager|info`)
	helpLineRe  = regexp.MustCompile(`(?i)\b(?:contact|assistance|help|questions|support|administrator|unsubscribe|list owner|abuse|webmaster|for (?:more )?information)\b`)
)

const addrPattern = `[A-Za-z0-9!#$%&'*+/=?^_{|}~.-]*[A-Za-z0-9_]@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*`

// textBlock is one recipient of a bounce's text and the lines about it.
type textBlock struct {
	addr  string
	lines []string
}

// bounceText is what the text of a bounce says.
type bounceText struct {
	preamble []string // explanation before the first recipient
	blocks   []textBlock
	returned string // from the returned message on
}

// readBounceText reads the explanation of a bounce. skip tells addresses
// that cannot be failed recipients (the bounce's own sender and recipient,
// the original's sender).
func readBounceText(s string, skip func(string) bool) bounceText {
	lines := strings.Split(s, "\n")
	cut := returnedStart(lines)
	bt := bounceText{returned: strings.Join(lines[cut:], "\n")}
	// The sender of a quoted original is no failed recipient either.
	senders := quotedSenders(bt.returned)
	found := recipientLines(lines[:cut], func(a string) bool { return skip(a) || senders[strings.ToLower(a)] })
	bt.group(lines[:cut], found)
	return bt
}

// quotedSenders returns the sender addresses, in lower case, of the
// header quoted at the start of returned.
func quotedSenders(returned string) map[string]bool {
	senders := map[string]bool{}
	for _, f := range firstFieldGroup(returned) {
		switch strings.ToLower(f.name) {
		case "from", "return-path", "sender":
			for _, a := range headerAddresses(f.value) {
				senders[strings.ToLower(a)] = true
			}
		}
	}
	return senders
}

// foundRecipient is a recipient line: the address and what the line says
// of it besides.
type foundRecipient struct{ addr, rest string }

// recipientLines returns, for each line, the recipient it names, if any.
// Phrases count only when no line has an address leading or labelled.
func recipientLines(lines []string, skip func(string) bool) []foundRecipient {
	strong := make([]foundRecipient, len(lines))
	weak := make([]foundRecipient, len(lines))
	anyStrong := false
	prev := ""
	for i, l := range lines {
		// "A message sent by\n  <a@b>\ncould not be delivered": the
		// address after a line ending in "sent by" or "from" is the
		// sender's.
		if !senderLeadRe.MatchString(prev) {
			if a, rest, ok := recipientLine(l); a != "" && !skip(a) {
				if ok {
					strong[i], anyStrong = foundRecipient{a, rest}, true
				} else {
					weak[i] = foundRecipient{a, rest}
				}
			}
		}
		if strings.TrimSpace(l) != "" {
			prev = l
		}
	}
	if !anyStrong {
		return weak
	}
	return strong
}

// group sorts lines into the preamble and one block per recipient, in the
// order recipients first appear; found says which lines name one. A line
// that starts a new context holds its lines back until the next recipient
// line, which they are about.
func (bt *bounceText) group(lines []string, found []foundRecipient) {
	index := map[string]int{}
	cur := -1 // the block lines go to; -1 before the first, -2 between contexts
	var pending []string
	for i, l := range lines {
		if f := found[i]; f.addr != "" {
			cur = bt.blockOf(f.addr, index)
			bt.blocks[cur].lines = append(bt.blocks[cur].lines, pending...)
			pending = nil
			if f.rest != "" {
				bt.blocks[cur].lines = append(bt.blocks[cur].lines, f.rest)
			}
			continue
		}
		switch {
		case cur == -1:
			bt.preamble = append(bt.preamble, l)
		case contextRe.MatchString(l):
			cur, pending = -2, []string{l}
		case cur == -2:
			pending = append(pending, l)
		default:
			bt.blocks[cur].lines = append(bt.blocks[cur].lines, l)
		}
	}
}

// blockOf returns the index of addr's block, adding one at its first
// mention; index maps lower-case addresses to blocks.
func (bt *bounceText) blockOf(addr string, index map[string]int) int {
	key := strings.ToLower(addr)
	j, seen := index[key]
	if !seen {
		j = len(bt.blocks)
		index[key] = j
		bt.blocks = append(bt.blocks, textBlock{addr: addr})
	}
	return j
}

// recipientLine returns the recipient a line names and what the line says
// of it besides the address. strong is set when the address leads the
// line or follows a label, the layouts bounces list recipients in; a
// recipient named in a phrase ("delivering your mail to a@b") is weak.
func recipientLine(l string) (addr, rest string, strong bool) {
	t := strings.TrimSpace(l)
	if t == "" || !strings.Contains(t, "@") {
		return "", "", false
	}
	if m := sendmailAddrRe.FindStringSubmatch(t); m != nil {
		rest = m[3]
		if findReplyCode(rest) == 0 {
			rest = m[1] + " " + rest
		}
		return cleanAddress(m[2]), rest, true
	}
	if m := leadAddrRe.FindStringSubmatchIndex(t); m != nil {
		rest = strings.TrimSpace(strings.TrimLeft(t[m[3]:], "\"'>:;,. "))
		return cleanAddress(t[m[2]:m[3]]), rest, true
	}
	if m := labelAddrRe.FindStringSubmatch(t); m != nil && !headerLabelRe.MatchString(m[1]) && !helpLabelRe.MatchString(m[1]) {
		return cleanAddress(m[2]), strings.TrimSpace(m[1] + " " + m[3]), true
	}
	if m := phraseAddrRe.FindStringSubmatchIndex(t); m != nil && !helpLineRe.MatchString(t) {
		return cleanAddress(t[m[2]:m[3]]), strings.TrimSpace(strings.TrimLeft(t[m[1]:], "\"'>:;,. ")), false
	}
	return "", "", false
}

// senderLeadRe matches a line that introduces the sender's address on the
// next line.
var senderLeadRe = regexp.MustCompile(`(?i)(?:sent by|\bfrom|sender)\s*:?\s*$`)

// Signs that a message is a bounce at all.
var (
	daemonFromRe = regexp.MustCompile(`(?i)mailer-daemon|mailer_daemon|postmaster|mail ?delivery|delivery ?(?:subsystem|system|status|notification|report)|mail ?administrator|mail ?system|\bmaildelivery|bounce|\bndr\b|mmsc|mail\.delivery\.system|daemon@|smtp[ -]?gateway`)

	bounceSubjectRe = regexp.MustCompile(`(?i)undeliver|undelivered|not (?:be )?delivered|delivery (?:status )?(?:notification|failure|failed|problem|report|status)|mail delivery|failure notice|returned mail|returned to sender|returning message|non[- ]?recapitabile|impossibile recapitare|mancata consegna|non[- ]remise|unzustellbar|nicht zustellbar|could not (?:be )?(?:delivered|send)|delivery has failed|has failed|mail system error|failed delivery|delivery failure|delayed mail|warning: |delayed|message not delivered|nondeliverable|non-delivery|rejected|error sending|mail error|メールエラー|不達|送信エラー|配信エラー|недоставлен|не доставлено`)

	bounceBodyRe = regexp.MustCompile(`(?i)this is the (?:qmail-send|mail delivery|postfix|mail system|mailer-daemon)|mail delivery software|mail delivery system|(?:could|can)(?: ?not|n't) (?:be )?deliver|(?:was|were|has|have) not (?:been )?delivered|wasn't delivered|undeliverable|delivery (?:to the following recipients? )?(?:has )?failed|failed permanently|permanent (?:error|failure|fatal)|unable to deliver|failed to deliver|delivery has failed|returned to sender|non (?:è stato |e' stato )?recapitat|impossibile recapitare|didn't reach|did not reach|following address(?:es|\(es\))? (?:had|failed)|error delivering|recipients? (?:failed|rejected|was rejected)|technical details of (?:permanent|temporary) failure|has been delayed|delivery .{0,40}delayed|not a member of this (?:mailing )?list|delivery status notification|remote host said|said: [245]\d\d|smtp error|fatal errors|rejected your message|message could not be|mailbox (?:is )?(?:full|unavailable)|user unknown|no such user|を送信できませんでした|送信できませんでした|配送できませんでした|не может быть доставлено`)

	// Wording of a notice that the message is late, not lost.
	delayRe        = regexp.MustCompile(`(?i)has been delayed|is delayed|been delayed|has not yet been delivered|not (?:yet )?been delivered yet|will be retried|will continue to (?:try|attempt)|still being retried|warning message only|only a temporary failure|temporary failure report|no action is required on your part|delivery attempts will continue|you do not need to resend|could not send (?:the )?message for past|could not send mail for past|delayed for more than`)
	delaySubjectRe = regexp.MustCompile(`(?i)delay|warning|still being retried|not yet delivered|temporary failure`)
)

// explanation is the text of a bounce before the returned message.
func (bt bounceText) explanation() string {
	var b strings.Builder
	b.WriteString(strings.Join(bt.preamble, "\n"))
	for _, bl := range bt.blocks {
		b.WriteString("\n" + bl.addr + "\n" + strings.Join(bl.lines, "\n"))
	}
	return b.String()
}

// textBounce reads a bounce that is not RFC 3464 from its text.
func (m *msg) textBounce(rep *Report, bt bounceText) bool {
	explanation := text.Cut(bt.explanation(), maxContext)
	daemon := daemonFromRe.MatchString(m.header.Get("From"))
	signal := daemon || bounceSubjectRe.MatchString(m.subject) ||
		m.header.Has("X-Failed-Recipients") || bounceBodyRe.MatchString(explanation)
	if !signal {
		return false
	}
	blocks := m.failedBlocks(bt)
	if len(blocks) == 0 && !(daemon && bounceSubjectRe.MatchString(m.subject)) {
		return false
	}

	// A notice is of a delay when its subject says so, or its text does
	// without saying the failure is final.
	delayed := delaySubjectRe.MatchString(m.subject) ||
		delayRe.MatchString(explanation) && !permanentRe.MatchString(explanation)
	preamble := text.Cut(joinDiagnostic(bt.preamble), maxContext)
	for _, b := range blocks {
		r := textRecipient(b, bt.preamble, preamble)
		if delayed {
			r.Action = "delayed"
		}
		r.assess(preamble, strings.Join(b.lines, "\n"))
		rep.Recipients = append(rep.Recipients, r)
	}
	rep.Kind = KindBounce
	if delayed {
		rep.Kind = KindDelay
	}
	return true
}

// failedBlocks returns the recipients of a bounce's text; when the text
// names none, those of X-Failed-Recipients, else whom the returned
// message was for when it was for one recipient only. Those have the
// preamble for their lines.
func (m *msg) failedBlocks(bt bounceText) []textBlock {
	if len(bt.blocks) > 0 {
		return bt.blocks
	}
	var blocks []textBlock
	for _, v := range m.header.Values("X-Failed-Recipients") {
		for _, a := range headerAddresses(v) {
			blocks = append(blocks, textBlock{addr: a, lines: bt.preamble})
		}
	}
	if len(blocks) > 0 {
		return blocks
	}
	if as := m.returnedRecipients(bt.returned); len(as) == 1 {
		return []textBlock{{addr: as[0], lines: bt.preamble}}
	}
	return nil
}

// textRecipient is the failed recipient of block b. A block that says
// nothing has the preamble for its diagnostic (joined, in preamble) and
// the codes the preamble's lines carry.
func textRecipient(b textBlock, preambleLines []string, preamble string) Recipient {
	r := Recipient{FinalRecipient: b.addr, Action: "failed"}
	r.SMTPCode, r.Status = replyCodes(strings.Join(b.lines, "\n"))
	r.Diagnostic = b.diagnostic()
	if r.Diagnostic == "" {
		r.Diagnostic = text.Cut(preamble, maxDiagnostic)
		if r.SMTPCode == 0 && r.Status == "" {
			r.SMTPCode, r.Status = replyCodes(strings.Join(preambleLines, "\n"))
		}
	}
	return r
}

// permanentRe is wording that a failure is final.
var permanentRe = regexp.MustCompile(`(?i)permanent(?:ly)? (?:error|failure|fatal|failed)|failed permanently|i've given up|i'm not going to try again|gave up|giving up|fatal error|this is a permanent|will not be (?:delivered|retried)|no further (?:delivery )?attempts`)

// returnedRecipients returns the To and Cc addresses of the returned
// message, attached or quoted.
func (m *msg) returnedRecipients(quoted string) []string {
	var as []string
	if m.returned != nil {
		as = append(as, headerAddresses(m.returned.Get("To"))...)
		as = append(as, headerAddresses(m.returned.Get("Cc"))...)
		return as
	}
	for _, f := range firstFieldGroup(quoted) {
		if strings.EqualFold(f.name, "To") || strings.EqualFold(f.name, "Cc") {
			as = append(as, headerAddresses(f.value)...)
		}
	}
	return as
}

// firstFieldGroup reads the header fields quoted at the start of s,
// skipping a marker line.
func firstFieldGroup(s string) fields {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if headerLineRe.MatchString(l) {
			groups := readFields(strings.Join(lines[i:], "\n"))
			if len(groups) > 0 {
				return groups[0]
			}
			return nil
		}
		if i > 3 {
			break
		}
	}
	return nil
}
