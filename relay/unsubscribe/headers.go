package unsubscribe

import (
	"regexp"
	"strings"
	"time"
)

// OneClick is the List-Unsubscribe-Post value (RFC 8058), and the form
// field a one-click POST carries.
const OneClick = "List-Unsubscribe=One-Click"

// Headers returns the values of List-Unsubscribe (RFC 2369) and
// List-Unsubscribe-Post (RFC 8058) for a message to u: the link
// baseURL/u/TOKEN, and, when mailto is not empty, a mailto: URI whose
// subject is "unsubscribe TOKEN". Both are empty when no token can be
// made for u.
//
// A token is at most MaxTokenLen characters: a target whose message id
// would make it longer gets a token without the message id (the
// unsubscription names the stream and the recipient; the message id only
// says where the link came from). Each <URI> of the value is then under
// 600 octets with a base URL of 80, so the caller, who folds the header,
// keeps lines under 998 octets by folding after the comma between them.
func (k *Keys) Headers(u Target, baseURL, mailto string, now time.Time) (listUnsubscribe, listUnsubscribePost string) {
	token, err := k.Token(u, now)
	if err != nil {
		u.MessageID = ""
		if token, err = k.Token(u, now); err != nil {
			return "", ""
		}
	}
	v := "<" + strings.TrimRight(baseURL, "/") + "/u/" + token + ">"
	if mailto != "" {
		v += ", <mailto:" + mailto + "?subject=unsubscribe%20" + token + ">"
	}
	return v, OneClick
}

// subjectToken finds "unsubscribe TOKEN" in a subject, the word in any
// case, after a "Re:" or anything else.
var subjectToken = regexp.MustCompile(`(?i)\bunsubscribe\s+([A-Za-z0-9_-]+)`)

// maxSubjectTokens bounds the candidates tried in one subject, so that a
// subject full of them costs little.
const maxSubjectTokens = 4

// FromMail returns the target of the token in the subject of an
// unsubscribe mail (decoded from RFC 2047 and unfolded), or ErrInvalid
// when it holds none that verifies.
func (k *Keys) FromMail(subject string, now time.Time) (Target, error) {
	for _, m := range subjectToken.FindAllStringSubmatch(subject, maxSubjectTokens) {
		if t, err := k.Verify(m[1], now); err == nil {
			return t, nil
		}
	}
	return Target{}, ErrInvalid
}
