package bounce

import (
	"regexp"
	"strings"

	"github.com/genropy/postino/outcome"
)

// A rule gives a reason to a failure. Exactly one of status, code and text
// is set:
//
//   - status matches the subject and detail of an enhanced status code of
//     either class: "X.1.1" matches 4.1.1 and 5.1.1, "X.7" any 4.7.x and
//     5.7.x.
//   - code matches the SMTP reply code.
//   - text matches the diagnostic, case-insensitively (see anyOf).
//
// hard says the address itself is at fault: it does not exist, nor does
// its domain, or it is closed. It makes a hard verdict only for a
// permanent failure about the address (see verdict).
type rule struct {
	status string
	code   int
	text   *regexp.Regexp
	reason Reason
	hard   bool
}

// anyOf compiles phrases into one pattern matching any of them. A phrase
// is a regular expression written in lower case: diagnostics are matched
// lowered, which is much faster than a case-insensitive pattern.
func anyOf(phrases ...string) *regexp.Regexp {
	return regexp.MustCompile(`(?:` + strings.Join(phrases, `|`) + `)`)
}

// rules is the whole of the classification, read top to bottom; the first
// row that matches decides. The order is the policy:
//
//  1. Wording that names its cause wins over any code, because servers
//     reuse codes: "550 5.1.1" for spam, "5.2.1" for unknown users,
//     "5.7.1" for everything. Within it, what is most specific comes first
//     (a full mailbox before an unknown user: "user's mailbox is full").
//  2. Specific enhanced status codes (RFC 3463, RFC 7372, RFC 7505, and
//     the ones Microsoft documents).
//  3. Wording that is telling but not conclusive, and what MTAs say of
//     their own failures (queue lifetime, timeouts, loops).
//  4. The subject of an enhanced status code alone: x.7 is policy...
//  5. Bare refusals, then the SMTP reply code alone where RFC 5321 or RFC
//     7504 gives it a meaning.
//
// This follows sisimai where it documents its choices: a diagnostic's
// wording is weighed before the status code is trusted, and a refusal
// before RCPT TO is not about the recipient. Rules from tier 4 on are weak
// (see weak): they say no more than the class of a code.
var rules = []rule{
	// 1. Wording that decides.
	{text: anyOf(`\bvirus`, `malware`, `infected`, `trojan`, `\bworm\b`), reason: ReasonVirus},
	{text: anyOf(
		`mail ?box (?:is |was )?(?:full|over ?quota)`, `mailbox full`, `over ?quota`, `quota (?:exceeded|full)`,
		`(?:exceed\w*|over) (?:the |their |his |her |its |your )?(?:storage|disk|mailbox|mail)? ?(?:quota|storage allocation)`,
		`storage (?:quota|allocation) exceeded`, `disk quota`, `mailbox size limit`, `user has exceeded`,
		`(?:mail ?box|mail folder|mailfolder|inbox)(?: size)? (?:has )?(?:exceeded|exceeds|is full)`,
		`too many messages (?:in|on) (?:the |this )?(?:mail ?box|account)`,
		`number of messages in recipient's mailbox exceeded`, `not enough (?:disk |storage )?space`,
		`boîte (?:aux lettres |de réception )?pleine`, `casella (?:di posta )?piena`, `postfach (?:ist )?voll`,
		`メールボックスが一杯`,
	), reason: ReasonMailboxFull},
	// A local mailer failed (the Diagnostic-Code of a pipe or a program
	// is "X-Unix; <exit code>"), whatever it printed.
	{text: anyOf(`^x-unix;`, `^x-local;`, `mailer error`, `local delivery failed`, `pipe to \|`,
		`command (?:died|failed)`, `exit (?:code|status)`, `procmail`), reason: ReasonSystem},
	{text: anyOf(
		`\b(?:dmarc|spf|dkim)\b.{0,60}(?:fail|not pass|reject|policy|invalid|missing|required|verif|alignment)`,
		`bad (?:spf|dkim|dmarc)`,
		`(?:fail\w*|not pass\w*|does not have) (?:to pass )?(?:the )?(?:\w+ )?(?:dmarc|spf|dkim|authentication information)`,
		`sender policy framework`, `unauthenticated (?:e-?mail|mail|message)`, `authentication checks? failed`,
		`fails to pass authentication`,
	), reason: ReasonAuthentication},
	// Missing or wrong reverse DNS of the sending host.
	{text: anyOf(
		`reverse[ -]?(?:dns|lookup|mapping|name|hostname)`, `\brdns\b`, `\bptr\b`, `no (?:valid )?reverse`,
		`(?:ip|host ?name|client) (?:name )?lookup failed`, `cannot find your hostname`,
		`(?:hostname|ip address) (?:does not|doesn't|did not) resolve`, `unresolvable (?:ip|address|host)`,
		`not resolve to`, `mismatches client ip`, `unverifi?yable sending ips?`,
	), reason: ReasonBlocked},
	// Reputation comes before rates: "rate limited due to IP reputation".
	{text: anyOf(`(?:poor|bad|low|sender|ip) reputation`, `reputation (?:is|of)`, `user complaints`, `unexpected volume`), reason: ReasonBlocked},
	{text: anyOf(
		`too many (?:connections|concurrent|sessions|simultaneous|messages|mails|e-?mails|recipients)`,
		`rate ?limit`, `rate-limit`, `throttl`, `too fast`, `slow down`, `sending rate`, `at a rate`,
		`connection limit`, `concurrency limit`, `frequency limit`,
		`exceeded (?:the )?(?:\S+ )?(?:sending|message|daily|hourly) (?:limit|quota)`,
		`limit (?:on|of) (?:the )?(?:number|messages|recipients)`,
	), reason: ReasonRateLimited},
	// Blocklists, and the sending host refused as such.
	{text: anyOf(
		`blocked using`, `black ?list`, `block ?list`, `\bdnsbl\b`, `\brbl\b`, `spamhaus`, `spamcop`, `abuseat`,
		`\bsorbs\b`, `barracudacentral`, `banned sending ip`, `(?:is|are|was|been|currently) listed (?:in|on|at|as) `,
		`(?:ip|host|server|sender|domain|network|client|connection)s? (?:address )?(?:\S+ )?(?:is |has been |was |are )?(?:blocked|banned|blacklisted|denylisted|temporarily blocked)`,
		`looks? (?:suspiciously )?like (?:a )?spammer`, `sending spam`, `spams? from your ip`, `dynamic ip`,
		`dial-?up`, `residential ip`, `please use the smtp (?:server|relay) of your`, `not allowed to send mail from`,
		`invalid ip for sending`, `your access to submit messages`, `access from ip address`,
		`client host rejected`, `helo command rejected`, `(?:sender|source) ip (?:address )?rejected`,
		`blocked for abuse`, `not currently accepting mail from your ip`,
		// Microsoft's refusals of a sending host: "messages from [ip]
		// weren't sent", with Outlook.com's SC-001, OU-002, DY-001 ... and
		// Office 365's (S3150), (AS3140) and the like.
		`messages from \S+ weren'?t sent`, `\b(?:sc|ou|dy|rp)-00\d\b`, `\(a?s\d{4,}\)`,
		// Orange and La Poste refuse a sending host they hold suspect
		// with "Service refusé" and a code, temporary or not.
		`service refus`,
	), reason: ReasonBlocked},
	// Named policies, before the spam wording they often mention.
	{text: anyOf(
		`not rfc ?\d+ compliant`, `rfc ?\d+ (?:compliant|compliance|violation)`, `not compliant with rfc`,
		`non-?compliant`, `for policy reasons`, `policy (?:violation|rejection)`, `potential security issue`,
		`violat\w* (?:of )?(?:our |the |local )?(?:\w+ )?polic`,
	), reason: ReasonPolicy},
	{text: anyOf(
		`spam`, `junk`, `\bbulk (?:mail|e-?mail)`, `unsolicited`, `\buce\b`, `\bube\b`, `content filter`,
		`content rejected`, `(?:message|mail) (?:content |body )?(?:was |is )?(?:rejected|refused|blocked) (?:as|by|due|because|for)`,
		`suspicious`, `phishing`, `considered (?:as )?(?:harmful|unsolicited)`, `classified as (?:spam|junk|bulk)`,
		`message filtered`, `objectionable`, `scam`,
		// Orange's spam refusal (OFR_506), under a 5.2.0 that says
		// nothing of the mailbox.
		`mail rejet[eé]\. mail rejected`,
	), reason: ReasonSpam},
	{text: anyOf(
		`(?:message|mail|e-?mail|letter)(?: size)? (?:is |was )?(?:too (?:large|big)|exceeds)`, `too (?:large|big) for`,
		`size (?:limit|exceeds|exceeded)`, `exceeds? (?:the )?(?:maximum|max\.?|allowed|fixed|size) (?:allowed )?(?:message )?size`,
		`message length exceeds`, `(?:maximum|max) (?:message )?size`, `message size`, `mesgtoobig`, `line limit exceeded`,
	), reason: ReasonTooLarge},
	// Relaying refused, or the sender must authenticate first.
	{text: anyOf(
		`relay(?:ing)? (?:access )?(?:denied|not permitted|not allowed|prohibited|refused)`,
		`(?:not|isn't) (?:allowed|permitted|authorized|configured) to relay`, `unable to relay`, `(?:we )?do not relay`,
		`no relaying`, `relay not permitted`, `insecure (?:mail )?relay`, `not in my list of allowed rcpthosts`,
		`not a gateway`, `relaying (?:mail )?(?:to .{1,60})?(?:is )?(?:denied|not allowed)`,
		`authentication required`, `smtp auth\w*`, `unauthenticated senders`,
	), reason: ReasonPolicy},
	// A refusal before RCPT TO cannot be about the recipient: the
	// connection, the greeting or the sender was refused.
	{text: anyOf(
		`after (?:initial connection|the connect|greeting|helo|ehlo|mail from)`,
		`in reply to (?:mail from|helo|ehlo) command`, `refused to talk to me`, `sender was rejected`,
		`my name was rejected`, `all recipient addresses rejected`, `>>> mail from:\s*<[^>]*>(?:\s+\S+=\S+)*\s*<<< [45]`,
	), reason: ReasonBlocked},
	// The sender address refused, or not allowed to post to a list.
	{text: anyOf(
		`(?:sender|envelope[ -]from|mail from|from address|return[ -]path)(?: \S+)?(?: address| domain)? (?:is )?(?:rejected|refused|denied|not allowed|invalid|not valid|blocked|blacklisted|unverified|not verified)`,
		`(?:unroutable|invalid|unknown|bogus|unverified) (?:sender|mail from)`, `sender verif\w* fail`,
		`domain of sender address`, `sender domain (?:must|does not|is|not)`, `from: domain is invalid`,
		`empty envelope senders`, `null sender`, `returned mail not accepted`, `purported responsible address`,
		`\bbatv\b`, `not (?:a )?member of`, `not allowed to post`, `permission to post`,
		`groups\.google\.com/support`, `different address or alias using the 'send mail as'`,
		// A mail gateway's user is its sender (sisimai reads it so); the
		// words say nothing sure of the recipient.
		`not a registered gateway user`,
	), reason: ReasonBlocked},
	{text: anyOf(
		`(?:account|mail ?box|user|recipient|address|e-?mail)(?: \S+){0,2} (?:is |has been |was |currently )?(?:disabled|deactivated|suspended|inactive|locked|closed|frozen|discontinued|not active|no longer active|expired|terminated|blocked for)`,
		`(?:account|mail ?box) (?:is |has been )?blocked`, `disabled (?:recipient|mailbox|account|user|address)`,
		`inactive (?:account|mailbox|user|recipient)`, `suspended (?:account|mailbox|user)`,
		`(?:mailbox|account) (?:not active|disabled|closed)`, `not (?:an? )?active (?:user|account|mailbox|address)`,
		`no longer (?:in use|active|valid)`, `account (?:has )?expired`,
	), reason: ReasonMailboxDisabled, hard: true},
	// Moved without a forwarding address: the address is dead.
	{text: anyOf(`has moved`, `no forwarding address`, `user not local`, `moved to another`,
		`mailbox has (?:been )?moved`, `address (?:has )?changed`), reason: ReasonUserUnknown, hard: true},
	{text: anyOf(
		// Office 365 refuses unknown recipients with "Recipient address
		// rejected: Access denied"; "All recipient addresses rejected :
		// Access denied" is a refusal of the sender (see above).
		`recipient address rejected: access denied`, `access denied\. as\(201806281\)`,
		`(?:user|recipient|mail ?box|address|account|addressee|local[ -]part|e-?mail address|destination mailbox|person)s?(?: \S+)? (?:is )?(?:unknown|not found|not known|doesn'?t exist|does not exist|no longer exists|not exist|not recognized|not recognised|invalid|does not have an account|is not valid|not listed)`,
		`unknown (?:user|recipient|mail ?box|address|addressee|local[ -]?part|e-?mail)`,
		`no such (?:user|recipient|mail ?box|address|account|person)`,
		`(?:user|recipient|mail ?box|address|account|e-?mail address)(?: \S+)? (?:was )?(?:not found|could not be found)`,
		`invalid (?:recipient|mail ?box|address|user|e-?mail address)`, `(?:invalid|unknown|bad) (?:final delivery )?user ?id`,
		`not a valid (?:mail ?box|recipient|user|address|e-?mail)`, `no valid recipients?`,
		`no (?:mailbox|account|user) (?:here )?(?:by|with) that name`, `no mail ?box (?:here|found|available)`,
		`recipnotfound`, `recipient ?not ?found`, `bad destination mailbox`, `doesn'?t have an? .{1,60} account`,
		`not listed in (?:the )?(?:domino|public name|name and address|directory)`, `addressee unknown`,
		`not our customer`, `is not a known user`, `mailbox unavailable`, `mailbox not available`,
		`undeliverable address`, `this address no longer accepts mail`, `there is no one at this address`,
		`you tried to reach does not exist`, `destinatario (?:sconosciuto|inesistente)`,
		`utente (?:sconosciuto|inesistente)`, `nessun utente`, `utilisateur inconnu`, `adresse (?:inconnue|inexistante)`,
		`unbekannte?r? (?:empfänger|benutzer)`, `existiert nicht`, `no existe`, `vdeliver: invalid`, `sorry, no mailbox`,
	), reason: ReasonUserUnknown, hard: true},
	// DNS failures the resolver expects to clear, before the wording of a
	// domain that does not exist.
	{text: anyOf(`not found, try again`, `name server (?:reply|timeout|failure)`, `malformed or unexpected name server`,
		`dns (?:timeout|temporary|server failure)`, `servfail`, `temporary failure in name resolution`,
		`host name lookup failure`), reason: ReasonNetwork},
	{text: anyOf(
		`(?:domain|host|mx|mail exchanger)(?: name)? (?:\S+ )?(?:not found|does not exist|doesn'?t exist|unknown|is unknown|has no mx)`,
		`domain is not reachable`, `no such (?:domain|host)`, `unknown (?:domain|host)`, `host (?:or domain name )?not found`,
		`nxdomain`, `(?:could not|couldn't|can't|cannot|unable to) (?:find|resolve|locate|look ?up) (?:any |the )?(?:host|domain|mail exchanger|mx|ip address)`,
		`no (?:valid )?mx(?: record)?s? (?:found|for|record)`, `dns lookup fail\w*`, `no route to domain`,
		`bad destination system`, `null mx`, `(?:does not|doesn't) accept (?:e-?)?mail`,
		`not accepting (?:any )?(?:network )?(?:messages|mail)`, `no smtp service`, `unrouteable (?:mail )?(?:domain|address)`,
		`unable to route`, `name or service not known`, `(?:recipient|destination) domain (?:is )?(?:invalid|unknown|not found)`,
		`not a valid domain`, `domain not (?:found|valid)`, `\b[a-z0-9-]+(?:\.[a-z0-9-]+)+ does not exist`,
	), reason: ReasonDomainNotFound, hard: true},

	// 2. Specific enhanced status codes.
	{status: "X.1.1", reason: ReasonUserUnknown, hard: true},     // bad destination mailbox address
	{status: "X.1.2", reason: ReasonDomainNotFound, hard: true},  // bad destination system address
	{status: "X.1.3", reason: ReasonUserUnknown, hard: true},     // bad destination mailbox address syntax
	{status: "X.1.6", reason: ReasonUserUnknown, hard: true},     // mailbox has moved
	{status: "X.1.7", reason: ReasonBlocked},                     // bad sender's mailbox address syntax
	{status: "X.1.8", reason: ReasonBlocked},                     // bad sender's system address
	{status: "X.1.10", reason: ReasonDomainNotFound, hard: true}, // recipient address has null MX
	{status: "X.2.1", reason: ReasonMailboxDisabled, hard: true}, // mailbox disabled
	{status: "X.2.2", reason: ReasonMailboxFull},                 // mailbox full
	{status: "X.2.3", reason: ReasonTooLarge},                    // message length exceeds administrative limit
	{status: "X.3.1", reason: ReasonSystem},                      // mail system full
	{status: "X.3.2", reason: ReasonDomainNotFound, hard: true},  // system not accepting network messages
	{status: "X.3.4", reason: ReasonTooLarge},                    // message too big for system
	{status: "X.4.1", reason: ReasonNetwork},                     // no answer from host
	{status: "X.4.2", reason: ReasonNetwork},                     // bad connection
	{status: "X.4.3", reason: ReasonSystem},                      // directory server failure
	{status: "X.4.4", reason: ReasonDomainNotFound, hard: true},  // unable to route
	{status: "X.4.6", reason: ReasonNetwork},                     // routing loop detected
	{status: "X.4.7", reason: ReasonExpired},                     // delivery time expired
	{status: "X.5.3", reason: ReasonRateLimited},                 // too many recipients
	{status: "X.7.13", reason: ReasonMailboxDisabled},            // user account disabled: x.7 is never hard
	{status: "X.7.20", reason: ReasonAuthentication},             // no passing DKIM signature
	{status: "X.7.21", reason: ReasonAuthentication},             // no acceptable DKIM signature
	{status: "X.7.22", reason: ReasonAuthentication},             // no valid author-matched DKIM signature
	{status: "X.7.23", reason: ReasonAuthentication},             // SPF validation failed
	{status: "X.7.24", reason: ReasonAuthentication},             // SPF validation error
	{status: "X.7.25", reason: ReasonBlocked},                    // reverse DNS validation failed
	{status: "X.7.26", reason: ReasonAuthentication},             // multiple authentication checks failed
	{status: "X.7.27", reason: ReasonBlocked},                    // sender address has null MX
	{status: "X.7.28", reason: ReasonSpam},                       // mail flood
	{status: "X.7.29", reason: ReasonAuthentication},             // ARC validation failure
	{status: "X.7.509", reason: ReasonAuthentication},            // Microsoft: DMARC reject
	{status: "X.7.606", reason: ReasonBlocked},                   // Microsoft: banned sending IP
	{status: "X.7.650", reason: ReasonBlocked},                   // Microsoft: IP reputation

	// 3. Telling wording, and what MTAs say of their own failures.
	{text: anyOf(
		`policy`, `prohibited`, `not permitted`, `not allowed`, `administrative(?:ly)? (?:prohibit|denied)`,
		`header error`, `(?:invalid|bad|malformed|missing|duplicate) (?:message )?header`, `headers? too (?:large|long|many)`,
		`too many headers`, `bare lf`, `line too long`, `8-?bit`, `media (?:error|not supported)`,
		`content (?:error|rejected)`, `conversion`, `violation`,
	), reason: ReasonPolicy},
	{text: anyOf(
		`retry time(?:out)? (?:not reached|exceeded)`, `(?:in|on) the queue too long`, `too long in (?:the )?queue`,
		`delivery time (?:has )?expired`, `(?:message|envelope) (?:has )?expired`, `expired after`,
		`could not deliver for the last`, `all hosts have been failing`,
		`(?:cannot|could not|can't) send (?:the )?(?:message|mail) for (?:the )?past`,
		`delivery attempts? (?:will continue|has expired)`, `failed \d+ attempts`,
		`after (?:\d+|multiple|many|several) (?:attempts|retries|tries)`, `has not yet been delivered`,
		`not (?:been )?delivered within`, `still undelivered`, `will keep trying`, `has been delayed`,
		`will be retried`, `still being retried`, `delayed for more than`, `maximum (?:queue|delivery) time`,
		`time ?out (?:expired|exceeded)`, `ttl expired`,
	), reason: ReasonExpired},
	{text: anyOf(
		`connection (?:timed out|time ?out|refused|reset|lost|closed|dropped|failed|broken)`, `timed out`,
		`no route to host`, `(?:network|host|server) (?:is )?unreachable`, `not reachable`,
		`(?:could not|couldn't|can't|cannot|unable to|failed to) (?:connect|establish|open a connection)`,
		`wasn'?t able to establish`, `socket error`, `lost connection`, `network error`,
		`did not accept our requests to connect`, `no answer`, `not responding`, `dns (?:error|failure|problem)`,
		`routing loop`, `mail loop`, `loops back to myself`, `too many hops`, `hop count exceeded`, `loop detected`,
		`starttls`, `\btls\b`, `\bssl\b`, `handshake`,
	), reason: ReasonNetwork},
	{text: anyOf(
		`system error`, `internal (?:server )?error`, `local configuration (?:error|failed|failure)`,
		`mail system (?:error|problem|full)`, `temporary (?:local )?problem`,
		`(?:server|system) (?:error|problem|failure|is busy|busy|full)`, `\bldap\b`, `misconfigur`, `not configured`,
		`configuration error`, `out of memory`, `disk (?:is )?full`, `insufficient (?:system |disk )?(?:storage|space)`,
		`service (?:is )?(?:currently |temporarily )?(?:unavailable|not available)`, `queue file write error`,
		`resources? (?:temporarily )?unavailable`, `local error`, `temporarily unavailable`,
	), reason: ReasonSystem},

	// 4. The subject of a status code alone.
	{status: "X.1", reason: ReasonUserUnknown, hard: true}, // addressing
	{status: "X.2", reason: ReasonMailboxDisabled},         // mailbox
	{status: "X.3", reason: ReasonSystem},                  // mail system
	{status: "X.4", reason: ReasonNetwork},                 // network and routing
	{status: "X.6", reason: ReasonPolicy},                  // message content or media
	{status: "X.7", reason: ReasonPolicy},                  // security or policy

	// 5. What is left of refusals is the receiver's decision; then the
	// reply code alone.
	{text: anyOf(`access denied`, `delivery not authorized`, `not authorized`, `refused`, `rejected`, `denied`, `not accepted`), reason: ReasonPolicy},
	{code: 421, reason: ReasonSystem},                     // service not available
	{code: 451, reason: ReasonSystem},                     // local error in processing
	{code: 452, reason: ReasonSystem},                     // insufficient system storage
	{code: 521, reason: ReasonDomainNotFound, hard: true}, // host does not accept mail
	{code: 551, reason: ReasonUserUnknown, hard: true},    // user not local
	{code: 552, reason: ReasonMailboxFull},                // exceeded storage allocation
	{code: 553, reason: ReasonUserUnknown, hard: true},    // mailbox name not allowed
	{code: 556, reason: ReasonDomainNotFound, hard: true}, // domain does not accept mail
	{code: 571, reason: ReasonBlocked},                    // not standard; used for blocks
}

// match reports whether the rule matches a failure; sub is the subject and
// detail of the status code, "1.1" for 5.1.1.
func (r *rule) match(sub string, code int, diagnostic string) bool {
	switch {
	case r.status != "":
		want := strings.TrimPrefix(r.status, "X.")
		if !strings.Contains(want, ".") {
			return strings.HasPrefix(sub, want+".")
		}
		return sub == want
	case r.code != 0:
		return code == r.code
	case r.text != nil:
		return r.text.MatchString(diagnostic)
	}
	return false
}

// Failure is a refusal as the classifier reads it: an upstream's reply
// during delivery, or a report's account of one.
type Failure struct {
	// Status is the enhanced status code, "5.1.1"; it may be empty.
	Status string
	// Code is the SMTP reply code, 0 if unknown.
	Code int
	// Text is the reply's words, or the report's diagnostic.
	Text string
	// OfMessage says the reply is about the message or its sender, not
	// the recipient's address, whatever its words: it answered MAIL FROM
	// or the end of DATA (the receiver had accepted the address at RCPT
	// TO), or it refused the whole message before any command.
	OfMessage bool
}

// Classify says what a failure says of the recipient's address, and why,
// by the rules table, for a reply alone (a report's recipient is judged
// with its action too: a failure after temporary replies is expired, see
// assess). The verdict is hard only when the address itself is refused for
// good: no such user, no such domain, a disabled or closed mailbox, moved
// without forwarding. Any other failure is soft, among them every
// temporary one (4xx, 4.x.x), every security or policy one (x.7.x), and
// every refusal of the message or the sender, which another message or a
// fixed sender may get through. A success (2.x.x, 2xx) has no verdict and
// no reason; a failure no rule explains is ReasonOther.
func Classify(f Failure) (outcome.Verdict, Reason) {
	status := findStatus(f.Status)
	if strings.HasPrefix(status, "2.") || status == "" && f.Code >= 200 && f.Code < 300 {
		return "", ""
	}
	return verdict(classify(status, f.Code, f.Text), status, f.Code, f.OfMessage)
}

// verdict is the verdict and reason rule i gives (none if i < 0) to a
// failure with these codes.
func verdict(i int, status string, smtpCode int, ofMessage bool) (outcome.Verdict, Reason) {
	if i < 0 {
		return outcome.VerdictSoft, ReasonOther
	}
	if rules[i].hard && !ofMessage && !transient(status, smtpCode) && !strings.HasPrefix(status, "5.7.") {
		return outcome.VerdictHard, rules[i].reason
	}
	return outcome.VerdictSoft, rules[i].reason
}

// classify returns the index of the first rule that matches, or -1.
func classify(status string, smtpCode int, diagnostic string) int {
	diagnostic = strings.ToLower(diagnostic)
	status = findStatus(status)
	sub := ""
	if status != "" {
		sub = status[2:]
	}
	for i := range rules {
		if rules[i].match(sub, smtpCode, diagnostic) {
			return i
		}
	}
	return -1
}

// weak reports whether rule i says no more than the class of a code: the
// rules from the first subject-only status rule ("X.1") on.
func weak(i int) bool {
	for j := range rules {
		if rules[j].status != "" && strings.Count(rules[j].status, ".") == 1 {
			return i >= j
		}
	}
	return false
}

// assess fills in the verdict and reason of a recipient that failed or is
// delayed. extra is the text around the recipient's diagnostic (the
// bounce's explanation); it is read when the diagnostic alone says no more
// than the class of its code. own is the report's text about this
// recipient alone, read for the command its reply answered.
func (r *Recipient) assess(extra, own string) {
	switch r.Action {
	case "delivered", "relayed", "expanded":
		return
	}
	status, code := r.Status, r.SMTPCode
	if strings.HasPrefix(status, "2.") {
		status = "" // a success code in a failure is a misreading
	}
	if code < 400 {
		code = 0
	}
	i := classifyWith(status, code, r.Diagnostic, extra)
	r.Verdict, r.Reason = verdict(i, status, code, ofMessageRe.MatchString(r.Diagnostic+"\n"+own))

	switch {
	case r.Action == "delayed":
		// Still being tried: soft by definition, and late if nothing
		// better than the class of the code is known.
		r.Verdict = outcome.VerdictSoft
		if i < 0 || weak(i) {
			r.Reason = ReasonExpired
		}
	case i >= 0 && rules[i].hard:
		// The words name the address, hard when the receiver refused it
		// for good; soft when it only put it off until the upstream gave
		// up, or refused it after taking it at RCPT TO. The reason stays.
	case senderSide[r.Reason] && i >= 0 && !weak(i):
		// Refused for what the sender sends or where from: the same
		// after any number of tries, and fixed on the sender's side.
	case transient(status, code) || r.Reason == ReasonExpired || gaveUpRe.MatchString(r.Diagnostic+"\n"+extra) ||
		r.Reason == ReasonNetwork && !strings.HasPrefix(status, "5.") && noAnswerRe.MatchString(r.Diagnostic+"\n"+extra):
		// Failed after temporary replies only (a full mailbox, a busy
		// or unreachable server, a name server that did not answer), or
		// saying its time ran out: the upstream retried for its whole
		// queue lifetime and gave up. The message will not arrive, but
		// that says nothing of the address: soft. The last reply stays
		// the diagnostic.
		r.Verdict, r.Reason = outcome.VerdictSoft, ReasonExpired
	}
}

// senderSide are the reasons that blame what the sender sends or where it
// sends from: a failure for one of them keeps its reason however long the
// upstream tried.
var senderSide = map[Reason]bool{
	ReasonSpam: true, ReasonVirus: true, ReasonBlocked: true, ReasonAuthentication: true,
	ReasonPolicy: true, ReasonTooLarge: true, ReasonRateLimited: true,
}

// transient reports whether a failure's codes are those of a temporary
// reply: a 4.x.x status or a 4xx reply code.
func transient(status string, smtpCode int) bool {
	return strings.HasPrefix(status, "4.") || smtpCode >= 400 && smtpCode < 500
}

// classifyWith returns the index of the rule that explains diagnostic, or
// -1. When the diagnostic alone says no more than the class of its code,
// the rule that explains it together with extra wins, if that says more.
func classifyWith(status string, code int, diagnostic, extra string) int {
	i := classify(status, code, diagnostic)
	if (i < 0 || weak(i)) && strings.TrimSpace(extra) != "" {
		if j := classify(status, code, diagnostic+"\n"+extra); j >= 0 && !weak(j) {
			return j
		}
	}
	return i
}

// ofMessageRe is wording that a reply answered MAIL FROM or the DATA
// command or its end: Postfix's "(in reply to end of DATA command)",
// Exim's "after end of data" and "after MAIL FROM", wrapped or not. Such a
// reply is about the sender or the content, however it is worded: an
// "Unknown user" at the end of DATA, after the receiver took the address
// at RCPT TO, is its filter refusing the message (sisimai's filtered, NTT
// docomo's refusal of a sender). Sendmail's transcripts are not read for
// it: with PIPELINING the replies to RCPT TO come after ">>> DATA".
var ofMessageRe = regexp.MustCompile(`(?i)in\s+reply\s+to\s+(?:end\s+of\s+)?(?:data|mail\s+from)\s+command|after\s+(?:end\s+of\s+data|mail\s+from)`)

// gaveUpRe is wording that the upstream stopped retrying because time
// ran out, whatever the receiver kept answering: Exim's "mailbox is full:
// retry timeout exceeded" under a 5.0.0, qmail's "in the queue too long",
// Sendmail's "could not be delivered for 5 days", Office 365's "Despite
// repeated attempts to deliver your message".
var gaveUpRe = regexp.MustCompile(`(?i)retry time(?:out)? exceeded|(?:in|on) the queue too long|too long in (?:the )?queue|could not be delivered for|delivery time (?:has )?expired|queue\.expired|despite repeated attempts to deliver|all hosts have been failing for a long time`)

// noAnswerRe is wording that the receiver did not answer at all, as
// opposed to answering badly (a refused or broken connection, DNS).
var noAnswerRe = regexp.MustCompile(`(?i)timed? ?out|did not accept our requests to connect|no answer|not responding|not reachable|unreachable|wasn'?t able to establish|unable to connect|could not connect|couldn'?t connect|failed to connect`)
