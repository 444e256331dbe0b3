"""capstone.html: one self-contained page with the training run, the generation speeds and the
learned heads' attention drawn as heatmaps (inline PNGs from matplotlib; nothing is fetched)."""
import html
from pathlib import Path

import numpy as np

from ..report.html import CSS, _png


def heatmap(weights: np.ndarray, labels: list[str], title: str) -> str:
    """A [T, T] attention pattern with the tokens on both axes, as a data: URI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    T = weights.shape[0]
    fig, ax = plt.subplots(figsize=(0.26 * T + 2, 0.26 * T + 1.2))
    im = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(T), labels, fontsize=6, rotation=90)
    ax.set_yticks(range(T), labels, fontsize=6)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    uri = "data:image/png;base64," + _png(fig)
    plt.close(fig)
    return uri


def render(summary: dict) -> str:
    """summary: submission, seed, steps, seconds, accuracy, speeds [(n, tok/s cached, tok/s full, same)],
    scores {(layer, head): (prev, induction)}, heads [(role, layer, head, score, weights, labels, note)]."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>Attention kit: capstone</title>"
           f"<style>{CSS}</style></head><body><h1>Your attention, running a model</h1>",
           f"<p>A {summary['layers']}-layer decoder (d_model {summary['d_model']}, {summary['n_heads']} heads per "
           f"layer) built from <code>{e(str(summary['submission']))}</code>'s CausalSelfAttention, trained "
           f"{summary['steps']} steps (seed {summary['seed']}) in {summary['seconds']:.1f} s to copy a repeated "
           f"random sequence: <b>{100 * summary['accuracy']:.1f}%</b> of the repeated half's tokens right.</p>",
           "<h2>Generation with and without your KV cache</h2><table><tr><th>new tokens</th><th>with cache (tok/s)"
           "</th><th>without (tok/s)</th><th>same tokens</th></tr>"]
    for n, cached, full, same in summary["speeds"]:
        out.append(f"<tr><td>{n}</td><td>{cached:.0f}</td><td>{full:.0f}</td><td>{'yes' if same else 'NO'}</td></tr>")
    out.append("</table><h2>Every head's scores</h2><p>previous-token score: the mean weight a position puts on the "
               "one just before it; induction score: in the repeated half, the mean weight on the position right "
               "after the current token's earlier occurrence.</p><table><tr><th>layer</th><th>head</th>"
               "<th>previous-token</th><th>induction</th></tr>")
    for (layer, head), (prev, ind) in sorted(summary["scores"].items()):
        out.append(f"<tr><td>{layer}</td><td>{head}</td><td>{prev:.2f}</td><td>{ind:.2f}</td></tr>")
    out.append("</table><h2>The learned heads</h2>")
    for role, layer, head, score, weights, labels, note in summary["heads"]:
        title = f"{role} head: layer {layer}, head {head} (score {score:.2f})"
        out.append(f"<figure id='{role.replace(' ', '-')}'><img class='heatmap' alt='{e(title)}' "
                   f"src='{heatmap(np.asarray(weights), labels, title)}'><figcaption>{e(title)}. {e(note)}"
                   "</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def write(summary: dict, path: Path) -> None:
    Path(path).write_text(render(summary))
