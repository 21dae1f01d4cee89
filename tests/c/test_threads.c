/* One database handle used from many threads at once: queries, writes and errors, each thread
 * seeing its own last error. */
#include <pthread.h>

#include "check.h"

#define THREADS 4
#define ROUNDS 25

struct job {
  mindlite_database *db;
  int id;
};

static void *work(void *arg) {
  const struct job *job = (const struct job *)arg;
  char sql[128];
  for (int round = 0; round < ROUNDS; round++) {
    mindlite_result *r = NULL;
    snprintf(sql, sizeof sql, "INSERT INTO hits VALUES (%d, %d)", job->id, round);
    CHECK_OK(job->db, mindlite_query(job->db, sql, &r));
    mindlite_result_free(r);

    snprintf(sql, sizeof sql, "SELECT count(*) FROM hits WHERE worker = %d", job->id);
    CHECK_OK(job->db, mindlite_query(job->db, sql, &r));
    int64_t n = 0;
    CHECK(mindlite_result_int64(r, 0, 0, &n) == MINDLITE_OK && n == round + 1);
    mindlite_result_free(r);

    /* Errors are per thread: this thread's message names this thread's table. */
    snprintf(sql, sizeof sql, "SELECT * FROM missing_%d", job->id);
    CHECK(mindlite_query(job->db, sql, &r) != MINDLITE_OK);
    char expected[32];
    snprintf(expected, sizeof expected, "missing_%d", job->id);
    CHECK_CONTAINS(mindlite_errmsg(job->db), expected);
  }
  return NULL;
}

int main(void) {
  mindlite_database *db = NULL;
  CHECK(mindlite_open_in_memory(NULL, &db, NULL) == MINDLITE_OK);
  exec(db, "CREATE TABLE hits (worker INT, round INT)");

  pthread_t threads[THREADS];
  struct job jobs[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i].db = db;
    jobs[i].id = i;
    CHECK(pthread_create(&threads[i], NULL, work, &jobs[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);

  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "SELECT count(*), count(DISTINCT worker) FROM hits", &r));
  int64_t rows = 0, workers = 0;
  CHECK(mindlite_result_int64(r, 0, 0, &rows) == MINDLITE_OK && rows == THREADS * ROUNDS);
  CHECK(mindlite_result_int64(r, 0, 1, &workers) == MINDLITE_OK && workers == THREADS);
  mindlite_result_free(r);
  CHECK(mindlite_close(db) == MINDLITE_OK);
  puts("test_threads: ok");
  return 0;
}
