package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/groupcommit"
)

// GroupCommit is a SQL store's group commit: the writes of concurrent
// callers, of the store's own type O, commit together (the store's commit,
// see CommitGroup and ApplyGroup). The writes a store hands over whole,
// Create, Transition and UpdateEvent, are here once; a store's Claim
// submits a write of its own.
type GroupCommit[O Op] struct {
	commits *groupcommit.Committer[O]
	op      func(Write) O
}

// NewGroupCommit starts a group commit that runs groups with commit; op
// makes the store's write of a Write.
func NewGroupCommit[O Op](cfg groupcommit.Config, commit func(group []O) []error, op func(Write) O) *GroupCommit[O] {
	return &GroupCommit[O]{commits: groupcommit.New(cfg, commit), op: op}
}

// Close waits for the writes handed over already.
func (g *GroupCommit[O]) Close() { g.commits.Close() }

// Submit hands o to the group commit and waits for its commit: the
// group's error, or o's own refusal.
func (g *GroupCommit[O]) Submit(ctx context.Context, o O) error {
	if err := g.commits.Do(ctx, o); err != nil {
		return err
	}
	return o.Base().Err
}

// Create is Messages.Create.
func (g *GroupCommit[O]) Create(ctx context.Context, m *backends.Message) error {
	if err := m.PrepareCreate(time.Now().UTC()); err != nil {
		return err
	}
	m.Version = 1
	if err := g.Submit(ctx, g.op(Write{Create: m})); err != nil {
		return fmt.Errorf("create message %s: %w", m.ID, err)
	}
	return nil
}

// Transition is Queue.Transition.
func (g *GroupCommit[O]) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Prepare(time.Now().UTC()); err != nil {
		return err
	}
	if err := g.Submit(ctx, g.op(Write{Transition: &t})); err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	return nil
}

// UpdateEvent is Events.UpdateEvent.
func (g *GroupCommit[O]) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	if err := u.Prepare(time.Now().UTC()); err != nil {
		return nil, err
	}
	o := g.op(Write{Update: &u})
	if err := g.Submit(ctx, o); err != nil {
		return nil, fmt.Errorf("event %s %s to %s: %w", u.ID, u.From, u.To, err)
	}
	return o.Base().Event, nil
}

// Claim is Queue.Claim: pick, which runs before, outside any
// transaction, so that finding nothing costs one read, makes the store's
// write of c, or none (ok false) when nothing is due.
func (g *GroupCommit[O]) Claim(ctx context.Context, c backends.Claim, pick func(c *backends.Claim) (o O, ok bool, err error)) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	o, ok, err := pick(&c)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	if !ok {
		return nil, nil
	}
	if err := g.Submit(ctx, o); err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	return o.Base().Claimed, nil
}
