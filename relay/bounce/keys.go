package bounce

import (
	"regexp"
	"strings"

	"github.com/emersion/go-message/mail"
)

// mailIDHeader is the header the relay stamps on what it sends.
const mailIDHeader = "X-Genro-Mail-ID"

// Quoted header lines of a returned message inside a text body, perhaps
// indented or quoted with ">".
var (
	quotedMailIDRe    = regexp.MustCompile(`(?im)^[ \t>]*` + regexp.QuoteMeta(mailIDHeader) + `:[ \t]*<?([^\s<>]+)>?`)
	quotedMessageIDRe = regexp.MustCompile(`(?im)^[ \t>]*Message-ID:[ \t]*\n?[ \t]*<([^\s<>]+)>`)
)

// returnedKeys reads the keys of the returned message's header.
func returnedKeys(k *Keys, h *mail.Header) {
	if h == nil {
		return
	}
	if k.MailID == "" {
		k.MailID = strings.Trim(strings.TrimSpace(h.Get(mailIDHeader)), "<>")
	}
	if k.MessageID == "" {
		k.MessageID = messageID(h.Get("Message-ID"))
	}
}

// quotedKeys reads the keys of a returned message quoted in a bounce's
// text rather than attached. The mail ID header is looked for in the whole
// text, being the relay's own and unmistakable; the Message-ID only in
// returned, the text from where the returned message starts, since the
// explanation may name other messages.
func quotedKeys(k *Keys, text, returned string) {
	if k.MailID == "" {
		if m := quotedMailIDRe.FindStringSubmatch(text); m != nil {
			k.MailID = m[1]
		}
	}
	if k.MessageID == "" {
		if m := quotedMessageIDRe.FindStringSubmatch(returned); m != nil {
			k.MessageID = m[1]
		}
	}
}

// messageID strips a Message-ID of its angle brackets and comments.
func messageID(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.IndexByte(v, '<'); i >= 0 {
		if j := strings.IndexByte(v[i:], '>'); j > 0 {
			return strings.TrimSpace(v[i+1 : i+j])
		}
	}
	return strings.Trim(v, "<> ")
}

// verpHeaders are where the address a bounce was sent to shows.
var verpHeaders = []string{"To", "Delivered-To", "X-Original-To", "Envelope-To", "Return-Path"}

// verpMatcher turns a bounce address template into a matcher of the whole
// address; the submatch is the id.
func verpMatcher(template string) *regexp.Regexp {
	before, after, ok := strings.Cut(template, "{id}")
	if !ok {
		return nil
	}
	return regexp.MustCompile(`(?i)^` + regexp.QuoteMeta(before) + `([A-Za-z0-9._-]{1,36})` + regexp.QuoteMeta(after) + `$`)
}

// verpID finds the id a bounce address carries in the bounce's own header.
func verpID(h mail.Header, templates []string) string {
	if len(templates) == 0 {
		return ""
	}
	var ms []*regexp.Regexp
	for _, t := range templates {
		if m := verpMatcher(t); m != nil {
			ms = append(ms, m)
		}
	}
	for _, key := range verpHeaders {
		for _, v := range h.Values(key) {
			for _, a := range headerAddresses(v) {
				for _, m := range ms {
					if sub := m.FindStringSubmatch(a); sub != nil {
						return sub[1]
					}
				}
			}
		}
	}
	return ""
}

// headerAddresses returns the addresses of an address header, leniently:
// Return-Path and Delivered-To are not always valid address lists.
func headerAddresses(v string) []string {
	if list, err := mail.ParseAddressList(v); err == nil && len(list) > 0 {
		as := make([]string, 0, len(list))
		for _, a := range list {
			as = append(as, a.Address)
		}
		return as
	}
	var as []string
	for _, a := range addrRe.FindAllString(v, -1) {
		as = append(as, cleanAddress(a))
	}
	return as
}
