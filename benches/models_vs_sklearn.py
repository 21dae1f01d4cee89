"""The built-in ML engine (`CREATE MODEL … PREDICT y`, then `t JOIN m`) against scikit-learn's
defaults (scaled Ridge / LogisticRegression, RandomForest, HistGradientBoosting) on the same
75/25 splits: held-out r2 or accuracy and training wall time, as a Markdown table. The seasonal
forecast compares a time-series model (`ORDER BY d GROUP BY g WINDOW … HORIZON …`, then
`WHERE t.d > LATEST`) with the same baselines fitted on the same direct lag design, and with
the seasonal naive forecast.

    python benches/models_vs_sklearn.py [--big] [--only NAME[,NAME]]

Run by `benches/models.sh --vs-sklearn`, which installs a release build of the package first.
A benchmark, not a test: it always exits 0."""

import argparse
import math
import re
import sys
import time

import numpy as np
import pyarrow as pa
from sklearn import datasets as skdata
from sklearn.ensemble import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

# A model's training may take minutes on --big with a debug build; past this it is reported as
# failed and the other datasets still run.
TRAINING_TIMEOUT_S = 3600.0
# Within this of the best baseline counts as keeping up (the final line).
CLOSE_ENOUGH = 0.02


class Dataset:
    """Named input columns (numbers, or text for a category) and a target: numbers for
    regression, text labels 'c0', 'c1', … for classification so that the engine classifies."""

    def __init__(self, name, task, columns, y):
        self.name = name
        self.task = task
        self.columns = columns
        self.y = y


def numbered(name, task, x, y):
    columns = {f"f{j}": x[:, j].astype(np.float64) for j in range(x.shape[1])}
    if task == "classification":
        y = np.array([f"c{int(v)}" for v in y])
    return Dataset(name, task, columns, y)


def exact_line():
    """y = 3x + 2 exactly, beside a column of noise labels: a linear fit should be perfect."""
    x = np.arange(80, dtype=np.int64)
    rng = np.random.default_rng(0)
    txt = np.array([f"t{k}" for k in rng.integers(0, 5, size=80)])
    return Dataset("exact_line", "regression", {"x": x, "txt": txt}, 3 * x + 2)


def many_categories():
    """y = the level of one of 300 shops + 2x + noise: the engine's target means against
    scikit-learn's one-hot of every shop (20 rows per shop in the training part)."""
    rng = np.random.default_rng(1)
    levels = rng.uniform(0.0, 100.0, 300)
    shop = rng.integers(0, 300, 8000)
    x = rng.uniform(0.0, 10.0, 8000)
    y = levels[shop] + 2.0 * x + rng.normal(0.0, 1.0, 8000)
    return Dataset("many_categories", "regression",
                   {"shop": np.array([f"s{k}" for k in shop]), "x": x}, y)


# The forecasting dataset: GROUPS series of DAYS days with a weekly and a yearly season, a
# trend and noise; the last HORIZON days of each are forecast from the rest.
GROUPS, DAYS, WINDOW, HORIZON = 3, 400, 28, 14


class Forecasting:
    """A seasonal daily series per group, forecast HORIZON days past its training rows."""

    name = "seasonal_forecast"
    task = "regression"

    def __init__(self):
        rng = np.random.default_rng(0)
        day = np.arange(DAYS)
        self.series = {}
        for g in range(GROUPS):
            level = 50.0 + 30.0 * g
            self.series[f"g{g}"] = (level + 0.02 * day + 10.0 * np.sin(2 * np.pi * day / 7)
                                    + 20.0 * np.sin(2 * np.pi * day / 365.25)
                                    + rng.normal(0.0, 1.0, DAYS))
        self.columns = {"d": None, "g": None}

    def truth(self):
        return np.concatenate([y[-HORIZON:] for y in self.series.values()])


def forecast_features(series, origin, step, group, groups):
    """The direct design the engine uses: the WINDOW values to the origin (most recent first),
    the step, the forecast day's weekday and day of year, and the group one-hot."""
    day = origin + step
    lags = series[origin - WINDOW + 1:origin + 1][::-1]
    return np.concatenate([lags, [step, day % 7, day % 365], [1.0 * (group == g) for g in groups]])


def run_sklearn_forecast(data):
    """{baseline: (r2 of the forecasts, fit seconds)}: each baseline fitted on every (origin,
    step) pair of the training days, and the seasonal naive forecast (the last week again)."""
    groups = list(data.series)
    train_days = DAYS - HORIZON
    x, y = [], []
    for g, series in data.series.items():
        for origin in range(WINDOW - 1, train_days - 1):
            for step in range(1, HORIZON + 1):
                if origin + step < train_days:
                    x.append(forecast_features(series, origin, step, g, groups))
                    y.append(series[origin + step])
    x, y = np.array(x), np.array(y)
    queries = np.array([forecast_features(series, train_days - 1, step, g, groups)
                        for g, series in data.series.items() for step in range(1, HORIZON + 1)])
    results = {}
    for name, make in baselines("regression"):
        model = make()
        start = time.perf_counter()
        model.fit(x, y)
        seconds = time.perf_counter() - start
        results[name] = (r2_score(data.truth(), model.predict(queries)), seconds)
    naive = np.concatenate([np.resize(series[train_days - 7:train_days], HORIZON)
                            for series in data.series.values()])
    results["seasonal_naive"] = (r2_score(data.truth(), naive), 0.0)
    return results


def run_mindlite_forecast(con, data):
    """(r2 of the forecasts, CREATE → complete seconds, description): `ORDER BY d GROUP BY g
    WINDOW … HORIZON …`, then the training rows joined with the model `WHERE t.d > LATEST`."""
    start_day = np.datetime64("2024-01-01")
    train_days = DAYS - HORIZON
    d, g, y = [], [], []
    for name, series in data.series.items():
        d.extend(start_day + np.arange(train_days))
        g.extend([name] * train_days)
        y.extend(series[:train_days])
    con.register("train_forecast", pa.table({
        "d": pa.array(np.array(d, dtype="datetime64[D]")), "g": g, "y": np.array(y)}))
    con.sql("DROP MODEL IF EXISTS mindsdb.m_forecast")
    start = time.perf_counter()
    con.sql("CREATE MODEL mindsdb.m_forecast FROM mindsdb (SELECT * FROM train_forecast) "
            f"PREDICT y ORDER BY d GROUP BY g WINDOW {WINDOW} HORIZON {HORIZON}")
    accuracy, engine_seconds = wait_complete(con, "m_forecast")
    seconds = time.perf_counter() - start
    described = con.describe_model("m_forecast")
    rows = con.sql("SELECT t.g, t.d, m.y FROM train_forecast AS t JOIN mindsdb.m_forecast AS m "
                   "WHERE t.d > LATEST ORDER BY t.g, t.d").fetchall()
    if len(rows) != GROUPS * HORIZON:
        raise RuntimeError(f"{len(rows)} forecasts for {GROUPS * HORIZON}")
    predicted = np.array([row[2] for row in rows], dtype=np.float64)
    return r2_score(data.truth(), predicted), seconds, {
        "validation": described.get("accuracies") or {"accuracy": accuracy},
        "model": described.get("model", "?"),
        "engine_training_s": engine_seconds,
    }


def all_datasets(big):
    """(name, builder) in the order reported; builders run only for the datasets chosen."""
    shipped = [
        ("diabetes", "regression", skdata.load_diabetes),
        ("breast_cancer", "classification", skdata.load_breast_cancer),
        ("wine", "classification", skdata.load_wine),
        ("digits", "classification", skdata.load_digits),
        ("iris", "classification", skdata.load_iris),
    ]
    found = [
        (name, lambda name=name, task=task, load=load: numbered(name, task, *load(return_X_y=True)))
        for name, task, load in shipped
    ]
    found.append(("exact_line", exact_line))
    found.append(("many_categories", many_categories))
    found.append(("friedman1", lambda: numbered(
        "friedman1", "regression", *skdata.make_friedman1(n_samples=2000, noise=1.0, random_state=0))))
    found.append(("classification20", lambda: numbered(
        "classification20", "classification", *skdata.make_classification(
            n_samples=2000, n_features=20, n_informative=10, random_state=0))))
    found.append(("seasonal_forecast", Forecasting))
    if big:
        found.append(("friedman1_100k", lambda: numbered(
            "friedman1_100k", "regression", *skdata.make_friedman1(n_samples=100_000, noise=1.0, random_state=0))))
    return found


def split(data):
    """Row indices of the train and test parts; classification keeps the class shares."""
    rows = np.arange(len(data.y))
    stratify = data.y if data.task == "classification" else None
    return train_test_split(rows, test_size=0.25, random_state=0, stratify=stratify)


def matrix(data):
    """The inputs as scikit-learn takes them: numbers as they are, a text column one-hot (all
    its labels known up front, so train and test get the same columns)."""
    parts = []
    for values in data.columns.values():
        if values.dtype.kind in "US":
            labels = np.unique(values)
            parts.append((values[:, None] == labels[None, :]).astype(np.float64))
        else:
            parts.append(values.astype(np.float64)[:, None])
    return np.hstack(parts)


def score(task, truth, predicted):
    return r2_score(truth, predicted) if task == "regression" else accuracy_score(truth, predicted)


def baselines(task):
    if task == "regression":
        return [
            ("ridge", lambda: make_pipeline(StandardScaler(), Ridge())),
            ("rf", lambda: RandomForestRegressor(random_state=0)),
            ("hgb", lambda: HistGradientBoostingRegressor(random_state=0)),
        ]
    return [
        ("logreg", lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))),
        ("rf", lambda: RandomForestClassifier(random_state=0)),
        ("hgb", lambda: HistGradientBoostingClassifier(random_state=0)),
    ]


def run_sklearn(data, train, test):
    """{baseline: (held-out score, fit seconds)}."""
    x = matrix(data)
    results = {}
    for name, make in baselines(data.task):
        model = make()
        start = time.perf_counter()
        model.fit(x[train], data.y[train])
        seconds = time.perf_counter() - start
        results[name] = (score(data.task, data.y[test], model.predict(x[test])), seconds)
    return results


def wait_complete(con, model):
    """Polls the models table until the model leaves generating/training; its row."""
    deadline = time.perf_counter() + TRAINING_TIMEOUT_S
    while True:
        status, error, accuracy, training_time = con.sql(
            "SELECT status, error, accuracy, training_time FROM mindsdb.models WHERE name = :name",
            {"name": model},
        ).fetchone()
        if status == "complete":
            return accuracy, training_time
        if status == "error":
            raise RuntimeError(f"training failed: {error}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"still {status} after {TRAINING_TIMEOUT_S:.0f} s")
        # Short polls: on the small datasets training itself takes tens of milliseconds.
        time.sleep(0.01)


def run_mindlite(con, data, train, test):
    """(held-out score, CREATE → complete seconds, the engine's own description)."""
    name = data.name
    con.register(f"train_{name}", pa.table(
        {**{c: v[train] for c, v in data.columns.items()}, "y": data.y[train]}))
    # No y in the test rows (nothing to leak), and row_id to line the predictions up: it is not
    # a model input, so the JOIN passes it through.
    con.register(f"test_{name}", pa.table(
        {"row_id": np.arange(len(test), dtype=np.int64), **{c: v[test] for c, v in data.columns.items()}}))
    con.sql(f"DROP MODEL IF EXISTS mindsdb.m_{name}")
    start = time.perf_counter()
    con.sql(f"CREATE MODEL mindsdb.m_{name} FROM mindsdb (SELECT * FROM train_{name}) PREDICT y")
    accuracy, engine_seconds = wait_complete(con, f"m_{name}")
    seconds = time.perf_counter() - start
    described = con.describe_model(f"m_{name}")
    rows = con.sql(
        f"SELECT t.row_id, m.y AS predicted FROM test_{name} AS t JOIN mindsdb.m_{name} AS m"
    ).fetchall()
    predicted = [None] * len(test)
    for row_id, value in rows:
        predicted[row_id] = value
    missing = sum(value is None for value in predicted)
    if len(rows) != len(test) or missing:
        raise RuntimeError(f"{len(rows)} rows predicted for {len(test)}, {missing} missing")
    if data.task == "regression":
        predicted = np.array(predicted, dtype=np.float64)
    else:
        predicted = np.array(predicted)
    return score(data.task, data.y[test], predicted), seconds, {
        "validation": described.get("accuracies") or {"accuracy": accuracy},
        "model": described.get("model", "?"),
        "engine_training_s": engine_seconds,
    }


def short(model):
    """The engine's model text with long column lists counted, not listed (digits has 64)."""
    return re.sub(r"\(([^()]*,[^()]*)\)",
                  lambda m: m.group(0) if m.group(1).count(",") < 4 else f"({m.group(1).count(',') + 1} columns)",
                  model)


def fmt(value, digits=3):
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", action="store_true", help="add friedman1_100k (100,000 rows)")
    parser.add_argument("--only", help="comma-separated dataset names")
    args = parser.parse_args()

    import mindlite

    chosen = all_datasets(args.big)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        known = {name for name, _ in all_datasets(True)}
        for n in wanted:
            if n not in known:
                print(f"unknown dataset '{n}' (known: {', '.join(sorted(known))})", file=sys.stderr)
        # --only names friedman1_100k without --big too: naming it is asking for it.
        chosen = [(name, build) for name, build in all_datasets(True) if name in wanted]

    con = mindlite.connect()
    rows, details = [], []
    for name, build in chosen:
        data = build()
        forecasting = isinstance(data, Forecasting)
        if forecasting:
            print(f"{name}: {GROUPS} series of {DAYS - HORIZON} days, {HORIZON} forecast",
                  file=sys.stderr, flush=True)
            base = run_sklearn_forecast(data)
        else:
            train, test = split(data)
            print(f"{name}: {len(train)} train / {len(test)} test rows, {len(data.columns)} inputs",
                  file=sys.stderr, flush=True)
            base = run_sklearn(data, train, test)
        best_name, (best_score, _) = max(base.items(), key=lambda item: item[1][0])
        try:
            if forecasting:
                ml_score, ml_seconds, info = run_mindlite_forecast(con, data)
            else:
                ml_score, ml_seconds, info = run_mindlite(con, data, train, test)
            error = None
        except Exception as e:  # a benchmark reports a failure and goes on
            ml_score, ml_seconds, info, error = float("nan"), None, None, f"{type(e).__name__}: {e}"
        hgb_seconds = base["hgb"][1]
        metric = "r2" if data.task == "regression" else "accuracy"
        gap = ml_score - best_score
        rows.append((name, data.task, metric, ml_score, best_score, best_name, gap, ml_seconds, hgb_seconds))
        others = ", ".join(f"{b} {fmt(s)} in {fmt(t, 2)} s" for b, (s, t) in base.items())
        if error:
            details.append(f"- {name}: mindlite failed ({error}); sklearn {others}")
        else:
            validation = ", ".join(f"{k} {fmt(v)}" for k, v in info["validation"].items())
            details.append(
                f"- {name}: mindlite `{short(info['model'])}`, its own validation {validation}, "
                f"TRAINING_TIME {fmt(info['engine_training_s'], 2)} s; sklearn {others}")

    print("| dataset | task | metric | mindlite | best sklearn | gap | mindlite train s | HGB train s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, task, metric, ml, best, best_name, gap, ml_s, hgb_s in rows:
        ratio = f"{ml_s / hgb_s:.1f}×" if ml_s is not None and hgb_s > 0 else "—"
        print(f"| {name} | {task} | {metric} | {fmt(ml)} | {fmt(best)} ({best_name}) | {gap:+.3f} "
              f"| {fmt(ml_s, 2)} | {fmt(hgb_s, 2)} | {ratio} |")
    print()
    print("\n".join(details))
    print()
    close = sum(1 for row in rows if not math.isnan(row[6]) and row[6] >= -CLOSE_ENOUGH)
    print(f"{close} of {len(rows)} datasets within {CLOSE_ENOUGH} of the best scikit-learn baseline")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:  # argparse's usage errors and --help
        pass
    except Exception as e:  # a benchmark, not a test: report and exit 0
        print(f"benchmark failed: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(0)
