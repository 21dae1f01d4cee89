/* mindlite_interrupt: a statement that would run for ever (a recursive CTE without an end) is
 * stopped from another thread, fails with MINDLITE_UNAVAILABLE naming the interrupt, and the
 * handle serves the next statement normally; a statement time limit from the config does the
 * same without anyone calling. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <pthread.h>
#include <time.h>

#include "check.h"

#define ENDLESS "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"

struct run {
  mindlite_database *db;
  mindlite_status status;
  char message[256];
  pthread_mutex_t lock; /* guards done */
  int done;
};

static int finished(struct run *run) {
  pthread_mutex_lock(&run->lock);
  int done = run->done;
  pthread_mutex_unlock(&run->lock);
  return done;
}

static void *endless(void *arg) {
  struct run *run = (struct run *)arg;
  mindlite_result *r = NULL;
  run->status = mindlite_query(run->db, ENDLESS, &r);
  snprintf(run->message, sizeof run->message, "%s", mindlite_errmsg(run->db));
  mindlite_result_free(r);
  pthread_mutex_lock(&run->lock);
  run->done = 1;
  pthread_mutex_unlock(&run->lock);
  return NULL;
}

static void pause_ms(long ms) {
  struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

int main(void) {
  mindlite_database *db = NULL;
  CHECK(mindlite_open_in_memory(NULL, &db, NULL) == MINDLITE_OK);

  struct run run = {db, MINDLITE_OK, "", PTHREAD_MUTEX_INITIALIZER, 0};
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, endless, &run) == 0);
  /* An interrupt stops what runs, not what starts later: under valgrind the statement may not
   * have started 300 ms on, so the interrupt is repeated until it ends (60 s at most). */
  for (int tries = 0; !finished(&run) && tries < 600; tries++) {
    pause_ms(100);
    CHECK_OK(db, mindlite_interrupt(db));
  }
  CHECK(finished(&run));
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(run.status == MINDLITE_UNAVAILABLE);
  CHECK_CONTAINS(run.message, "interrupted");

  /* The handle goes on: the interrupt stopped what ran, not what comes after. */
  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "SELECT 41 + 1", &r));
  int64_t answer = 0;
  CHECK(mindlite_result_int64(r, 0, 0, &answer) == MINDLITE_OK && answer == 42);
  mindlite_result_free(r);
  CHECK(mindlite_interrupt(NULL) == MINDLITE_MISUSE);
  CHECK(mindlite_close(db) == MINDLITE_OK);

  /* A time limit from the config stops it too. */
  CHECK(mindlite_open_in_memory("[query]\nstatement_timeout_secs = 1\n", &db, NULL) == MINDLITE_OK);
  CHECK(mindlite_query(db, ENDLESS, &r) == MINDLITE_UNAVAILABLE);
  CHECK_CONTAINS(mindlite_errmsg(db), "time limit");
  mindlite_result_free(r);
  CHECK(mindlite_close(db) == MINDLITE_OK);
  puts("test_interrupt: ok");
  return 0;
}
