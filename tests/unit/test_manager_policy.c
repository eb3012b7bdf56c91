/* test_manager_policy.c — the checkpoint manager's retention decision
 * (src/manager/policy.h): the rules one by one, every combination of up
 * to five steps in every state under a grid of policies checked against
 * the rules stated independently, and bad input. Pure: no files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#include "manager/policy.h"

#define C DCP_STEP_COMMITTED
#define P DCP_STEP_PENDING
#define I DCP_STEP_INCOMPLETE
#define X DCP_STEP_CORRUPT
#define F DCP_STEP_FOREIGN

static void decide(const dcpi_retention *p, const dcpi_step_entry *e, size_t n, dcpi_verdict *v,
                   dcpi_decision_summary *sum) {
  assert_int_equal(dcpi_retention_decide(p, e, n, v, sum), DCP_OK);
}

/* One decision and what it must give: the verdicts, and the summary's
 * fields where they are not NC (not checked). */
typedef struct rule_case {
  const char *what;
  dcpi_retention p;
  size_t n;
  dcpi_step_entry e[6];
  dcpi_verdict want[6];
  int64_t deleted, anchor, kept_bytes, over_budget; /* NC: not checked */
} rule_case;

#define NC INT64_MIN
#define ANY NC, NC, NC, NC

static const rule_case rule_cases[] = {
    {"keep_last 2: the two newest committed steps",
     {.keep_last = 2}, 4, {{10, C, 1, 0}, {20, C, 1, 0}, {30, C, 1, 0}, {40, C, 1, 0}},
     {DCPI_DELETE_OLD, DCPI_DELETE_OLD, DCPI_KEEP_LAST, DCPI_KEEP_NEWEST}, 2, 40, 2, NC},
    {"keep_last 0 keeps everything",
     {.keep_last = 0}, 4, {{10, C, 1, 0}, {20, C, 1, 0}, {30, C, 1, 0}, {40, C, 1, 0}},
     {DCPI_KEEP_LAST, DCPI_KEEP_LAST, DCPI_KEEP_LAST, DCPI_KEEP_NEWEST}, 0, 40, 4, 0},
    {"keep_every and a pinned step",
     {.keep_last = 1, .keep_every = 100}, 6,
     {{100, C, 1, 0}, {150, C, 1, 1}, {175, C, 1, 0}, {200, C, 1, 0}, {250, C, 1, 0},
      {300, C, 1, 0}},
     {DCPI_KEEP_EVERY, DCPI_KEEP_PINNED, DCPI_DELETE_OLD, DCPI_KEEP_EVERY, DCPI_DELETE_OLD,
      DCPI_KEEP_NEWEST}, ANY},
    /* the newest committed step is kept whatever else: pending, corrupt
     * and incomplete steps above it do not count as newer; 5 bytes kept
     * over a budget of 1, the anchor stays */
    {"the anchor is the newest committed step",
     {.keep_last = 1, .max_bytes = 1}, 5,
     {{1, C, 5, 0}, {2, C, 5, 0}, {3, X, 0, 0}, {4, I, 0, 0}, {5, P, 0, 0}},
     {DCPI_DELETE_OLD, DCPI_KEEP_NEWEST, DCPI_KEEP_CORRUPT, DCPI_DELETE_ABANDONED,
      DCPI_KEEP_PENDING}, NC, 2, NC, 1},
    {"keep_incomplete keeps the incomplete directory",
     {.keep_last = 1, .max_bytes = 1, .keep_incomplete = true}, 5,
     {{1, C, 5, 0}, {2, C, 5, 0}, {3, X, 0, 0}, {4, I, 0, 0}, {5, P, 0, 0}},
     {DCPI_DELETE_OLD, DCPI_KEEP_NEWEST, DCPI_KEEP_CORRUPT, DCPI_KEEP_INCOMPLETE,
      DCPI_KEEP_PENDING}, ANY},
    {"no committed step: no anchor",
     {.keep_last = 1}, 3, {{1, I, 0, 0}, {2, F, 0, 0}, {3, P, 0, 0}},
     {DCPI_DELETE_ABANDONED, DCPI_KEEP_FOREIGN, DCPI_KEEP_PENDING}, 1, -1, 0, 0},
    {"no step at all", {.keep_last = 1}, 0, {{0}}, {0}, 0, -1, 0, 0},
    {"max_bytes deletes oldest first",
     {.max_bytes = 30}, 5,
     {{1, C, 10, 0}, {2, C, 10, 0}, {3, C, 10, 1}, {4, C, 10, 0}, {5, C, 10, 0}},
     {DCPI_DELETE_BYTES, DCPI_DELETE_BYTES, DCPI_KEEP_PINNED, DCPI_KEEP_LAST, DCPI_KEEP_NEWEST},
     2, 5, 30, 0},
    /* only the pinned one and the anchor would remain: 20 bytes */
    {"max_bytes below what must stay",
     {.max_bytes = 15}, 5,
     {{1, C, 10, 0}, {2, C, 10, 0}, {3, C, 10, 1}, {4, C, 10, 0}, {5, C, 10, 0}},
     {DCPI_DELETE_BYTES, DCPI_DELETE_BYTES, DCPI_KEEP_PINNED, DCPI_DELETE_BYTES,
      DCPI_KEEP_NEWEST}, 3, 5, 20, 1},
};

#define CHECK_FIELD(c, got, field)                                                         \
  do {                                                                                     \
    if ((c)->field != NC && (int64_t)(got) != (c)->field)                                    \
      fail_msg("%s: " #field " is %lld, want %lld", (c)->what, (long long)(got),            \
               (long long)(c)->field);                                                     \
  } while (0)

/* The rules one by one: every case of rule_cases. */
static void test_rules(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof rule_cases / sizeof rule_cases[0]; k++) {
    const rule_case *c = &rule_cases[k];
    dcpi_verdict v[6];
    dcpi_decision_summary sum;
    decide(&c->p, c->n ? c->e : NULL, c->n, c->n ? v : NULL, &sum);
    for (size_t i = 0; i < c->n; i++)
      if (v[i] != c->want[i])
        fail_msg("%s: step %lld is %s, want %s", c->what, (long long)c->e[i].step,
                 dcpi_verdict_name(v[i]), dcpi_verdict_name(c->want[i]));
    CHECK_FIELD(c, sum.deleted, deleted);
    CHECK_FIELD(c, sum.anchor, anchor);
    CHECK_FIELD(c, sum.kept_bytes, kept_bytes);
    CHECK_FIELD(c, sum.over_budget, over_budget);
  }
}

static void test_bad_input(void **state) {
  (void)state;
  dcpi_retention p = {0};
  dcpi_verdict v[2] = {DCPI_KEEP_LAST, DCPI_KEEP_LAST};
  dcpi_step_entry dup[] = {{5, C, 0, 0}, {5, C, 0, 0}};
  dcpi_step_entry down[] = {{6, C, 0, 0}, {5, C, 0, 0}};
  dcpi_step_entry neg[] = {{-1, C, 0, 0}};
  dcpi_step_entry badstate[] = {{1, (dcp_step_state)77, 0, 0}};
  assert_int_equal(dcpi_retention_decide(&p, dup, 2, v, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_retention_decide(&p, down, 2, v, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_retention_decide(&p, neg, 1, v, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_retention_decide(&p, badstate, 1, v, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_retention_decide(NULL, dup, 0, v, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_retention_decide(&p, NULL, 1, v, NULL), DCP_EINVAL);
  assert_int_equal(dcpi_retention_decide(&p, dup, 1, NULL, NULL), DCP_EINVAL);
  assert_int_equal(v[0], DCPI_KEEP_LAST); /* untouched on error */
  for (int k = 0; k <= DCPI_DELETE_ABANDONED; k++)
    assert_string_not_equal(dcpi_verdict_name((dcpi_verdict)k), "unknown");
}

/* ---- every combination, against the rules stated independently --------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void check_rules(const dcpi_retention *p, const dcpi_step_entry *e, size_t n,
                        const dcpi_verdict *v, const dcpi_decision_summary *sum) {
  int64_t anchor = -1;
  for (size_t i = 0; i < n; i++)
    if (e[i].state == C) anchor = e[i].step;
  assert_int_equal(sum->anchor, anchor);
  size_t deleted = 0;
  uint64_t kept = 0;
  bool any_last_left = false;
  for (size_t i = 0; i < n; i++) {
    bool del = dcpi_verdict_deletes(v[i]);
    deleted += del;
    /* only committed and incomplete steps can go, and never the anchor */
    if (e[i].state != C && e[i].state != I) assert_false(del);
    if (e[i].state == I) assert_int_equal(del, !p->keep_incomplete);
    if (e[i].state != C) continue;
    if (e[i].step == anchor) assert_int_equal(v[i], DCPI_KEEP_NEWEST);
    if (e[i].pinned || (p->keep_every && e[i].step % (int64_t)p->keep_every == 0))
      assert_false(del);
    /* rank among committed steps, newest first */
    uint32_t newer = 0;
    for (size_t j = i + 1; j < n; j++) newer += e[j].state == C;
    bool by_count = p->keep_last == 0 || newer < p->keep_last;
    if (!by_count && !e[i].pinned && !(p->keep_every && e[i].step % (int64_t)p->keep_every == 0) &&
        e[i].step != anchor)
      assert_int_equal(v[i], DCPI_DELETE_OLD);
    if (v[i] == DCPI_DELETE_BYTES) {
      assert_true(p->max_bytes > 0);
      assert_true(by_count);
      /* oldest first: every older step kept only by count went too */
      for (size_t j = 0; j < i; j++) assert_int_not_equal(v[j], DCPI_KEEP_LAST);
    }
    if (v[i] == DCPI_KEEP_LAST) any_last_left = true;
    if (!del) kept += e[i].bytes;
  }
  assert_int_equal(sum->deleted, deleted);
  assert_int_equal(sum->kept_bytes, kept);
  if (p->max_bytes && kept > p->max_bytes) {
    assert_true(sum->over_budget);
    assert_false(any_last_left); /* nothing deletable by bytes is left */
  } else {
    assert_false(sum->over_budget);
  }
  if (!p->max_bytes)
    for (size_t i = 0; i < n; i++) assert_int_not_equal(v[i], DCPI_DELETE_BYTES);
}

static void test_exhaustive(void **state) {
  (void)state;
  static const dcp_step_state states[] = {C, P, I, X, F};
  static const uint32_t lasts[] = {0, 1, 2, 3};
  static const uint64_t everies[] = {0, 2, 3};
  static const uint64_t budgets[] = {0, 1, 25, 60};
  uint64_t combos = 0;
  for (size_t n = 0; n <= 5; n++) {
    size_t total = 1;
    for (size_t k = 0; k < n; k++) total *= 5;
    for (size_t code = 0; code < total; code++) {
      dcpi_step_entry e[6];
      size_t c = code;
      int64_t step = (int64_t)(next() % 3);
      for (size_t k = 0; k < n; k++) {
        e[k].state = states[c % 5];
        c /= 5;
        e[k].step = step;
        step += 1 + (int64_t)(next() % 3);
        e[k].bytes = next() % 20;
        e[k].pinned = e[k].state == C && next() % 5 == 0;
      }
      for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 3; b++)
          for (size_t m = 0; m < 4; m++)
            for (int inc = 0; inc < 2; inc++) {
              dcpi_retention p = {.keep_last = lasts[a], .keep_every = everies[b],
                                  .max_bytes = budgets[m], .keep_incomplete = inc};
              dcpi_verdict v[6];
              dcpi_decision_summary sum;
              decide(&p, e, n, v, &sum);
              check_rules(&p, e, n, v, &sum);
              /* deterministic */
              dcpi_verdict w[6];
              decide(&p, e, n, w, NULL);
              assert_memory_equal(v, w, n * sizeof *v);
              combos++;
            }
    }
  }
  assert_true(combos > 350000);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_exhaustive),
  };
  return TU_RUN(tests, NULL, NULL);
}
