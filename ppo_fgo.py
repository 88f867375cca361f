"""PPO with GAE and a critic, StepCoder's compiler-feedback rewards, and FGO masking.

Paper: Dou et al. 2024, "StepCoder: Improving Code Generation with Reinforcement Learning from
Compiler Feedback" (ACL 2024). StepCoder is PPO (Schulman et al. 2017) with GAE (Schulman et
al. 2015) on a reward computed by running the program on unit tests, plus two additions: CCCS
(a curriculum, cccs.py) and FGO (fine-grained optimization, here).

The equations (per response; t runs over its response tokens, m_t the 0/1 response mask):

    reward        r_t = -beta_kl * (logp_t - ref_t)  +  [t == last valid token] * R
                  R   = stepcoder_reward(sandbox verdict): pass +1, wrong answer -0.3,
                        runtime error / timeout -0.6, compile error -1
    GAE           delta_t = r_t + gamma * V_{t+1} - V_t
                  A_t     = delta_t + gamma * lambda * A_{t+1}        (backwards, valid t only)
                  ret_t   = A_t + V_t
    whitening     A <- (A - mean(A)) / (std(A) + 1e-8)   over the valid tokens of the batch
    policy loss   grpo.policy_loss (clipped surrogate), with per-token A_t and mask m_t * f_t
    value loss    0.5 * max((V - ret)^2, (clip(V, V_old - c, V_old + c) - ret)^2)
    FGO           f_t = 0 if token t lies on a code line that no unit test executed, else 1

FGO. The sandbox runs the tests with line tracing and reports the program's executed lines
(union over tests). A line counts as "not executed" only if it is executable: it has bytecode
(some code object's co_lines() names it), which is exactly the set of lines sys.settrace can
report. Lines without bytecode (blank lines, comments, `else:`, `try:`, `finally:`, a
function's docstring, the closing bracket of a multi-line call) are neutral and resolved by
`fgo_line_mask`: a statement spread over several lines takes one status for all its lines;
a neutral non-blank line takes the status of the next code line below it (a comment describes,
an `else:` opens, what follows), so an unreached `else:` branch is masked whole, keyword
included; blank lines and anything after the last code line are kept. A test killed for
time, memory or output reports no lines, so those verdicts (and compile errors) mask nothing. Tokens outside the code
(the fence, prose around it) are kept: FGO only removes code that did not influence the reward.
A token whose characters touch several lines is masked only if all of them are masked (it also
wrote part of code that ran). Compile errors mask nothing: the whole program earned the -1.

Simplifications and choices (the paper leaves these open):
- The value loss is NOT FGO-masked. The critic predicts the return from every response state,
  and GAE bootstraps through all of them (V_{t+1} of a masked token enters the advantage of
  the token before it); leaving those values untrained would corrupt the advantages of the
  executed code around them. FGO only decides which tokens the policy is pushed on.
- Masked positions of `gae` are skipped (the recursion jumps over them) and get advantage 0;
  responses are right-padded, so for a contiguous response this is the usual GAE with
  V = 0 after the last token (the episode ends there).
- memory_limit and output_limit are runtime failures the program caused: -0.6, like a
  runtime error. A response with no extractable code gets -1, like a compile error (there is
  no program to run).
- The critic defaults to a separate copy of the policy's body: StepCoder trains it with its own
  learning rate (critic 1.5e-6 vs policy 5e-7), and value-loss gradients through a shared body
  would move the policy. Sharing (`share_body=True`) halves the memory.
"""
from __future__ import annotations

import ast
import copy
import types

import torch
import torch.nn as nn

from grpo import aggregate

# ----------------------------------------------------------------------------- PPO math


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
        gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the valid positions of each row.

    rewards, values, mask [B, T] -> advantages, returns [B, T] (0 where mask is 0).
    Runs from the end backwards; a masked position is skipped: it contributes neither its
    reward nor its value, and the next valid position's value and advantage carry over it.
    The last valid token of a row bootstraps from V = 0 (the episode ends there).

    Example (gamma 0.9, lam 0.5): rewards [0, 0, 1], values [0.5, 0.4, 0.8], mask [1, 1, 1]
      t=2: delta = 1 - 0.8 = 0.2                    A = 0.2
      t=1: delta = 0.9*0.8 - 0.4 = 0.32             A = 0.32 + 0.45*0.2  = 0.41
      t=0: delta = 0.9*0.4 - 0.5 = -0.14            A = -0.14 + 0.45*0.41 = 0.0445
    """
    mask = mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])   # [B]
    next_adv = torch.zeros_like(values[:, 0])     # [B]
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        advantages[:, t] = adv_t * m
        # Only valid positions move the carried state: masked ones are transparent.
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_adv = torch.where(m > 0, adv_t, next_adv)
    returns = (advantages + values) * mask
    return advantages, returns


def whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
           eps: float = 1e-8) -> torch.Tensor:
    """Normalise x [B, T] to mean 0, std 1 over its valid tokens (mask [B, T]); 0 elsewhere.

    Population variance (divide by the number of valid tokens). shift_mean=False adds the
    mean back (only the scale changes). Statistics are over this batch: with data parallelism
    each rank whitens its own part.
    """
    mask = mask.to(x.dtype)
    n = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / n
    var = (((x - mean) ** 2) * mask).sum() / n
    out = (x - mean) / torch.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, clip: float = 0.2, agg: str = "token-mean",
               denom: float | None = None) -> tuple[torch.Tensor, dict]:
    """Clipped value loss: 0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2).

    values, old_values, returns, mask [B, T] -> (scalar loss, stats). Aggregated like the
    policy loss (grpo.aggregate; `denom` = the step's global normaliser). The clip keeps one
    update from moving a value estimate more than `clip` away from the one that made the
    advantages. stats: clip_frac (share of valid tokens where the clipped term is larger).
    """
    clipped_v = old_values + torch.clamp(values - old_values, -clip, clip)
    unclipped_err = (values - returns) ** 2
    clipped_err = (clipped_v - returns) ** 2
    loss_t = 0.5 * torch.maximum(unclipped_err, clipped_err)
    loss = aggregate(loss_t, mask, agg, denom)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        clip_frac = float(((clipped_err > unclipped_err).to(mask.dtype) * mask).sum() / n)
    return loss, {"vf_clip_frac": clip_frac}


def last_valid_index(mask: torch.Tensor) -> torch.Tensor:
    """mask [B, T] -> [B] index of the last 1 in each row (-1 for an empty row)."""
    T = mask.shape[1]
    pos = torch.arange(T, device=mask.device).expand_as(mask)
    return torch.where(mask > 0, pos, torch.full_like(pos, -1)).max(dim=1).values


def kl_in_reward(score: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                 mask: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-token rewards [B, T]: -beta * (logp - ref) on valid tokens, score [B] added on the
    last valid token of each row (a row with no valid token gets nothing).

    logp - ref is the k1 estimate of KL(policy || ref) for the sampled token: its sum over a
    response is an unbiased estimate of the sequence KL, which is what the return penalises.
    """
    mask = mask.to(logp.dtype)
    rewards = -beta * (logp - ref_logp) * mask
    last = last_valid_index(mask)                                  # [B]
    rows = torch.nonzero(last >= 0).squeeze(1)
    rewards[rows, last[rows]] += score.to(rewards.dtype)[rows]
    return rewards


# ----------------------------------------------------------------------------- rewards

# StepCoder's table (paper, section 3; -0.6 for a timeout is the same authors' harness).
STEPCODER_REWARDS = {
    "pass": 1.0,
    "wrong_answer": -0.3,
    "runtime_error": -0.6,
    "timeout": -0.6,
    "memory_limit": -0.6,   # ours: the program ran and crashed, like a runtime error
    "output_limit": -0.6,   # ours: same
    "compile_error": -1.0,
    "no_code": -1.0,        # ours: nothing to run, like a program that does not compile
}


def stepcoder_reward(status: str | None, table: dict | None = None) -> float:
    """Reward of one response from its sandbox verdict; status None (no code extracted) is
    "no_code". `table` overrides entries of STEPCODER_REWARDS."""
    rewards = {**STEPCODER_REWARDS, **(table or {})}
    key = "no_code" if status is None else status
    if key not in rewards:
        raise ValueError(f"unknown sandbox status {status!r}; expected one of {sorted(rewards)}")
    return float(rewards[key])


# ----------------------------------------------------------------------------- FGO: lines


def executable_lines(program: str) -> set[int]:
    """1-based lines of `program` that have bytecode: the lines a line tracer can report.

    Empty set if the program does not compile.
    """
    try:
        code = compile(program, "<program>", "exec")
    except (SyntaxError, ValueError):
        return set()
    lines, stack = set(), [code]
    while stack:
        c = stack.pop()
        lines.update(line for _, _, line in c.co_lines() if line)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return lines


def _statement_units(tree: ast.AST) -> list[range]:
    """Line ranges that share one status: each simple statement (lineno..end_lineno) and each
    compound statement's header (from its first line to the line before its body)."""
    units = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        inner = [c.lineno if isinstance(c, ast.stmt) else c.pattern.lineno
                 for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.match_case))]
        last = max(node.lineno, min(inner) - 1) if inner else node.end_lineno
        units.append(range(node.lineno, last + 1))
    return units


def fgo_line_mask(program: str, executed_lines: set[int]) -> list[int]:
    """Per line of `program` (index i = line i+1): 0 = code no test executed, 1 = keep.

    See the module docstring for the rules. A program that does not compile keeps every line.
    Example: executed {1, 2, 3} of
        1 def sign(x):
        2     if x >= 0:
        3         return 1
        4     else:            <- neutral, takes line 5's status
        5         return -1    <- executable, not executed
    gives [1, 1, 1, 0, 0].
    """
    lines = program.splitlines()
    runnable = executable_lines(program)
    if not runnable:
        return [1] * len(lines)
    executed = set(executed_lines)
    status: dict[int, int] = {}
    for unit in _statement_units(ast.parse(program)):
        if runnable.intersection(unit):
            ran = int(bool(executed.intersection(unit)))
            for line in unit:
                status[line] = ran
    for line in runnable - status.keys():   # e.g. `except E:` (an ExceptHandler, not a stmt)
        status[line] = int(line in executed)
    mask, below = [1] * len(lines), 1
    for line in range(len(lines), 0, -1):   # backwards: neutral lines look at the code below
        if line in status:
            below = mask[line - 1] = status[line]
        elif lines[line - 1].strip():
            mask[line - 1] = below
    return mask


# ----------------------------------------------------------------------------- FGO: tokens


def token_char_spans(tokenizer, token_ids, window: int = 8) -> list[tuple[int, int]]:
    """Character span (start, end) of each generated token in its decoded text.

    The text is tokenizer.decode(token_ids, skip_special_tokens=True,
    clean_up_tokenization_spaces=False); the spans tile it. Works on the sampled ids (no
    re-tokenisation, which can split the text differently). Incremental: each token's text is
    decode(window + token) minus decode(window), with a window of up to `window` earlier tokens
    (byte-level BPE decodes locally). A token that ends inside a multi-byte character
    (decodes to U+FFFD) waits; it and the tokens completing the character share its span.
    Special tokens get an empty span.
    """
    ids = [int(i) for i in token_ids]

    def decode(part):
        return tokenizer.decode(part, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    spans, done, end = [], 0, 0   # tokens [done, i] have no span yet; `end` chars are placed
    for i in range(len(ids)):
        lo = max(0, done - window)
        prev, cur = decode(ids[lo:done]), decode(ids[lo:i + 1])
        if cur.endswith("\ufffd") and i < len(ids) - 1:
            continue
        piece = cur[len(prev):] if cur.startswith(prev) else cur[len(prev.rstrip("\ufffd")):]
        spans += [(end, end + len(piece))] * (i + 1 - done)
        end += len(piece)
        done = i + 1
    return spans


def code_char_span(response_text: str, code: str | None) -> tuple[int, int] | None:
    """(start, end) of the extracted code (data.extract_code's result) in the response text;
    None if there is no code or it is not a verbatim substring."""
    if not code:
        return None
    start = response_text.rfind(code)
    return None if start < 0 else (start, start + len(code))


def fgo_token_mask(response_text: str, token_char_spans: list[tuple[int, int]],
                   code_span: tuple[int, int] | None, executed_lines: set[int] | None,
                   line_offset: int = 0, program: str | None = None) -> list[int]:
    """0/1 FGO mask over the response tokens (one entry per span).

    code_span: (start, end) of the code inside response_text (None: keep everything).
    executed_lines: 1-based lines of the rewarded program that ran (None: no coverage, keep).
    The rewarded program is `program` (default: the code itself). For CCCS it is prefix +
    completion: line k of the response's code is program line k + line_offset, where
    line_offset is the number of lines of the prefix; prefix lines have no response tokens.
    """
    keep = [1] * len(token_char_spans)
    if code_span is None or executed_lines is None:
        return keep
    cs, ce = code_span
    code = response_text[cs:ce]
    line_mask = fgo_line_mask(code if program is None else program, executed_lines)
    line_of_char = []                       # 1-based code line of each code character
    for k, text in enumerate(code.splitlines(keepends=True), start=1):
        line_of_char += [k] * len(text)

    def masked(k):
        i = k + line_offset - 1
        return 0 <= i < len(line_mask) and line_mask[i] == 0

    for t, (s, e) in enumerate(token_char_spans):
        chars = range(max(s, cs) - cs, min(e, ce) - cs)
        if not chars:
            continue                        # fence, prose, special token
        # Whitespace belongs to whichever line it sits on only if the token has nothing else.
        touched = {line_of_char[c] for c in chars if not code[c].isspace()} or \
                  {line_of_char[c] for c in chars}
        if all(masked(k) for k in touched):
            keep[t] = 0
    return keep


# Verdicts whose coverage is complete. A test killed for time, memory or output reports no
# lines (its tracer dies with it), so FGO would mask code that may well have run: keep all.
FGO_STATUSES = frozenset({"pass", "wrong_answer", "runtime_error"})


def fgo_executed_lines(status: str | None, executed_lines: set[int] | None) -> set[int] | None:
    """The executed lines FGO may trust for this verdict, or None (mask nothing)."""
    return executed_lines if status in FGO_STATUSES else None


def masked_share(fgo_mask: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Share of response tokens FGO removes from the policy loss (both [B, T])."""
    n = response_mask.sum()
    return float(((1 - fgo_mask) * response_mask).sum() / n) if n > 0 else 0.0


# ----------------------------------------------------------------------------- critic


class ValueModel(nn.Module):
    """Critic: a causal LM's transformer body and a linear head giving one value per token.

    forward(input_ids, attention_mask [B, T]) -> values [B, T] (float32). V at position t is the
    value of the state after token t. The head starts at zero (V = 0 everywhere): the first
    advantages are then plain returns instead of noise from a random head.
    Build with `from_pretrained(path)` (a separate copy, the default: own weights, own learning
    rate) or `from_policy(lm, share_body=True)` (the policy's own body module: value-loss
    gradients then also reach the policy's weights).
    """

    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> "ValueModel":
        """A new body loaded from a checkpoint (kwargs go to AutoModel.from_pretrained)."""
        from transformers import AutoModel
        body = AutoModel.from_pretrained(path, **kwargs)
        return cls(body, body.config.hidden_size)

    @classmethod
    def from_policy(cls, lm: nn.Module, share_body: bool = False) -> "ValueModel":
        """From a loaded causal LM: its body itself (share_body) or a deep copy of it."""
        body = lm.get_decoder()
        return cls(body if share_body else copy.deepcopy(body), lm.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask,
                           use_cache=False).last_hidden_state           # [B, T, H]
        return self.head(hidden.float()).squeeze(-1)                    # [B, T]
