"""The small networks the pitch stage runs in C, trained offline: one hidden
layer of tanh units and a logistic output, trained full-batch by Adam with
the classes weighted to balance and an L2 penalty, from a fixed seed (the
same data give the same weights), and written as the arrays of a C header.
Shared by bench/train_reattack.py (pitch_reattack_model.h) and
bench/train_salience.py (pitch_voice_model.h)."""
import numpy as np


def train(X, Y, hidden, l2, steps, rows=None, seed=0):
    """(W, mu, sd) for features X (n x d) and labels Y (0/1); with rows, a
    random subsample of at most that many rows is trained on."""
    rng = np.random.default_rng(seed)
    if rows is not None and len(Y) > rows:
        i = np.sort(rng.choice(len(Y), rows, replace=False))
        X, Y = X[i], Y[i]
    mu, sd = X.mean(0), X.std(0) + 1e-6
    Z = (X - mu) / sd
    d = Z.shape[1]
    W = {"W1": rng.normal(0, 1 / np.sqrt(d), (d, hidden)), "b1": np.zeros(hidden),
         "w2": rng.normal(0, 1 / np.sqrt(hidden), hidden), "b2": np.zeros(())}
    m = {k: np.zeros_like(v) for k, v in W.items()}
    v2 = {k: np.zeros_like(v) for k, v in W.items()}
    wt = np.where(Y == 1, (len(Y) - Y.sum()) / max(Y.sum(), 1), 1.0)
    wt /= wt.mean()
    for i in range(steps):
        h = np.tanh(Z @ W["W1"] + W["b1"])
        p = 1 / (1 + np.exp(-(h @ W["w2"] + W["b2"])))
        g = (p - Y) * wt / len(Y)
        gh = np.outer(g, W["w2"]) * (1 - h * h)
        G = {"W1": Z.T @ gh + l2 * W["W1"], "b1": gh.sum(0), "w2": h.T @ g + l2 * W["w2"],
             "b2": g.sum()}
        for k in W:
            m[k] = 0.9 * m[k] + 0.1 * G[k]
            v2[k] = 0.999 * v2[k] + 0.001 * G[k] ** 2
            W[k] = W[k] - 0.01 * (m[k] / (1 - 0.9 ** (i + 1))) / (
                np.sqrt(v2[k] / (1 - 0.999 ** (i + 1))) + 1e-8)
    return W, mu, sd


def logit(model, X):
    W, mu, sd = model
    return np.tanh(((X - mu) / sd) @ W["W1"] + W["b1"]) @ W["w2"] + W["b2"]


def arr(name, values):
    body = ",\n  ".join(", ".join(repr(float(x)) for x in values[i:i + 4])
                        for i in range(0, len(values), 4))
    return f"static const double {name}[{len(values)}] = {{\n  {body}}};\n"


def write_body(f, prefix, hidden_macro, model, check_x):
    """The header's arrays (prefix_mu, _sd, _w1, _b1, _w2, _b2), the hidden
    size as hidden_macro, a training row and the log-odds numpy gave it (the
    unit test checks the C evaluation against it), and the closing #endif."""
    W, mu, sd = model
    f.write(f"#define {hidden_macro} {len(W['b1'])}\n")
    f.write(arr(f"{prefix}_mu", mu) + arr(f"{prefix}_sd", sd))
    f.write(arr(f"{prefix}_w1", W["W1"].ravel()) + arr(f"{prefix}_b1", W["b1"]))
    f.write(arr(f"{prefix}_w2", W["w2"]))
    f.write(f"static const double {prefix}_b2 = {float(W['b2'])!r};\n\n")
    f.write("/* a training peak's features and the log-odds numpy gave them (the unit\n"
            " * test checks the C evaluation against it) */\n")
    f.write(arr(f"{prefix}_check_x", check_x))
    f.write(f"static const double {prefix}_check_logit = "
            f"{float(logit(model, check_x[None, :])[0])!r};\n\n#endif\n")
