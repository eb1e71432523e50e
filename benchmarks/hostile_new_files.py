"""Hostile files for the commands and flags that came after the first catalogue (group 6 of
hostile_new_cases.py): serving traces, price tables, Hugging Face config.json files and
workload templates with broken [transformer.moe], mla, sliding_window, weight_dtype and
tied_embeddings values. Written under WORK/in (hashed before and after every case)."""

from __future__ import annotations

import json
import os
from pathlib import Path

TRACE_HEAD = "arrival_s,input_tokens,output_tokens\n"
TRANSFORMER = (
    'name = "t"\nphase = "training"\n[transformer]\n'
    "d_model = 1024\nd_ff = 4096\nheads = 16\nkv_heads = 4\nhead_dim = 64\n"
    "seq_len = 4096\nbatch = 8\nlayers = 4\ngated = true\nvocab = 32000\n"
)
MOE = "[transformer.moe]\nexperts = 8\nexperts_per_token = 2\nexpert_d_ff = 1024\n"
MLA = (
    "[transformer.mla]\nq_lora_rank = 256\nkv_lora_rank = 128\nqk_rope_head_dim = 32\n"
    "qk_nope_head_dim = 64\nv_head_dim = 64\n"
)
# name -> text after TRANSFORMER: each a wrong value in one of the new template tables
TEMPLATES = {
    "moe_ok": MOE,
    "moe_experts0": MOE.replace("experts = 8", "experts = 0"),
    "moe_k_gt_experts": MOE.replace("experts_per_token = 2", "experts_per_token = 9"),
    "moe_k0": MOE.replace("experts_per_token = 2", "experts_per_token = 0"),
    "moe_capacity_nan": MOE + "capacity_factor = nan\n",
    "moe_capacity_inf": MOE + "capacity_factor = inf\n",
    "moe_capacity_neg": MOE + "capacity_factor = -1.0\n",
    "moe_imbalance_nan": MOE + "imbalance = nan\n",
    "moe_experts_string": MOE.replace("experts = 8", 'experts = "8"'),
    "moe_experts_float": MOE.replace("experts = 8", "experts = 8.5"),
    "moe_experts_bool": MOE.replace("experts = 8", "experts = true"),
    "moe_experts_huge": MOE.replace("experts = 8", "experts = 1" + "0" * 30),
    "moe_experts_1e9": MOE.replace("experts = 8", "experts = 1_000_000_000"),
    "moe_expert_d_ff_neg": MOE.replace("expert_d_ff = 1024", "expert_d_ff = -1"),
    "moe_shared_neg": MOE + "shared_experts = -1\n",
    "moe_dense_first_too_many": MOE + "dense_layers_first = 99\n",
    "moe_unknown_key": MOE + "expertz = 3\n",
    "moe_not_table": "",  # `moe = 5` goes into [transformer] (see _templates)
    "mla_ok": MLA,
    "mla_rank0": MLA.replace("kv_lora_rank = 128", "kv_lora_rank = 0"),
    "mla_rank_nan": MLA.replace("kv_lora_rank = 128", "kv_lora_rank = nan"),
    "mla_rank_string": MLA.replace("kv_lora_rank = 128", 'kv_lora_rank = ""'),
    "mla_unknown_key": MLA + "rank = 4\n",
    "mla_missing_key": MLA.replace("v_head_dim = 64\n", ""),
    "sw_zero": "",  # sliding_window = 0 ... in [transformer]
    "sw_negative": "",
    "sw_nan": "",
    "sw_string": "",
    "sw_huge": "",
    "sw_table_bad": "",
    "sw_table_nan": "",
    "sw_table_ratio0": "",
    "sw_table_missing": "",
    "sw_table_unknown": "",
    "sw_table_1e308": "",
    "weight_dtype_bad": "",
    "weight_dtype_int": "",
    "weight_dtype_empty": "",
    "tied_string": "",
    "tied_int": "",
    "d_model_nan": "",
    "d_model_5000_digits": "",
    "layers_1e308": "",
}
IN_TRANSFORMER = {
    "moe_not_table": "moe = 5\n",
    "sw_zero": "sliding_window = 0\n",
    "sw_negative": "sliding_window = -4096\n",
    "sw_nan": "sliding_window = nan\n",
    "sw_string": 'sliding_window = "4k"\n',
    "sw_huge": "sliding_window = 9223372036854775807\n",
    "sw_table_bad": "sliding_window = { window = 0, every = -1 }\n",
    "sw_table_nan": "sliding_window = { window = nan, local_per_global = 5 }\n",
    "sw_table_ratio0": "sliding_window = { window = 1024, local_per_global = 0 }\n",
    "sw_table_missing": "sliding_window = { window = 1024 }\n",
    "sw_table_unknown": "sliding_window = { window = 1024, local_per_global = 5, x = 1 }\n",
    "sw_table_1e308": "sliding_window = { window = 1e308, local_per_global = 5 }\n",
    "weight_dtype_bad": 'weight_dtype = "int3"\n',
    "weight_dtype_int": "weight_dtype = 4\n",
    "weight_dtype_empty": 'weight_dtype = ""\n',
    "tied_string": 'tied_embeddings = "false"\n',
    "tied_int": "tied_embeddings = 1\n",
}
REPLACE = {
    "d_model_nan": ("d_model = 1024", "d_model = nan"),
    "d_model_5000_digits": ("d_model = 1024", "d_model = " + "9" * 5000),
    "layers_1e308": ("layers = 4", "layers = 1e308"),
}


def _templates(d: Path) -> None:
    for name, tail in TEMPLATES.items():
        head = TRANSFORMER + IN_TRANSFORMER.get(name, "")
        old, new = REPLACE.get(name, ("", ""))
        if old:
            head = head.replace(old, new)
        (d / f"tpl_{name}.toml").write_text(head + tail, encoding="utf-8")


def _traces(d: Path, big_rows: int) -> None:
    rows = "".join(f"{i * 0.1:.1f},{100 + i},{50 + i}\n" for i in range(20))
    (d / "trace_ok.csv").write_text(TRACE_HEAD + rows)
    (d / "trace_empty.csv").write_text("")
    (d / "trace_header_only.csv").write_text(TRACE_HEAD)
    (d / "trace_one_row.csv").write_text(TRACE_HEAD + "0,10,10\n")
    (d / "trace_text.csv").write_text(TRACE_HEAD + "0,10,10\nsoon,ten,10\n")
    (d / "trace_short_row.csv").write_text(TRACE_HEAD + "0,10,10\n1\n")
    (d / "trace_long_row.csv").write_text(TRACE_HEAD + "0,10,10\n1,2,3,4,5,6\n")
    (d / "trace_wrong_header.csv").write_text("t,in,out\n0,10,10\n1,10,10\n")
    (d / "trace_nan.csv").write_text(TRACE_HEAD + "0,10,10\nnan,10,10\n")
    (d / "trace_inf_tokens.csv").write_text(TRACE_HEAD + "0,10,10\n1,inf,10\n")
    (d / "trace_negative.csv").write_text(TRACE_HEAD + "0,10,10\n-1,10,10\n")
    (d / "trace_zero_tokens.csv").write_text(TRACE_HEAD + "0,10,10\n1,0,10\n")
    (d / "trace_1e308.csv").write_text(TRACE_HEAD + "0,10,10\n1,1e308,1e308\n")
    (d / "trace_frac_tokens.csv").write_text(TRACE_HEAD + "0,10,10\n1,10.5,10\n")
    (d / "trace_5000_digits.csv").write_text(TRACE_HEAD + "0,10,10\n1," + "9" * 5000 + ",10\n")
    (d / "trace_arrival_1e300.csv").write_text(TRACE_HEAD + "0,10,10\n1e300,10,10\n")
    (d / "trace_same_time.csv").write_text(TRACE_HEAD + "0,10,10\n" * 2000)
    (d / "trace_bad_utf8.csv").write_bytes(TRACE_HEAD.encode() + b"0,10,10\n\xff\xfe,1,1\n")
    (d / "trace_nul.csv").write_bytes(TRACE_HEAD.encode() + b"0,10,10\n1\x00,10,10\n")
    (d / "trace_huge_field.csv").write_text(TRACE_HEAD + "0,10,10\n1," + "1" * 200_000 + ",1\n")
    (d / "trace_quote.csv").write_text(TRACE_HEAD + '0,10,10\n"1,10,10\n' + "2,10,10\n" * 10)
    (d / "trace_bom.csv").write_bytes(
        b"\xef\xbb\xbf" + (TRACE_HEAD + "0,10,10\n1,10,10\n").encode()
    )
    with (d / "trace_big.csv").open("w", encoding="utf-8") as fh:
        fh.write(TRACE_HEAD)
        for i in range(big_rows):
            fh.write(f"{i * 0.01:.2f},{500 + i % 1500},{100 + i % 400}\n")


def _prices(d: Path) -> None:
    (d / "prices_ok.toml").write_text("[h100-sxm]\nusd_per_hour = 2.5\n")
    (d / "prices_nan.toml").write_text("[h100-sxm]\nusd_per_hour = nan\n")
    (d / "prices_inf.toml").write_text("[h100-sxm]\nusd_per_hour = inf\n")
    (d / "prices_negative.toml").write_text("[h100-sxm]\nusd_per_hour = -2.5\n")
    (d / "prices_zero.toml").write_text("[h100-sxm]\nusd_per_hour = 0\n")
    (d / "prices_1e308.toml").write_text("[h100-sxm]\nusd_per_hour = 1e308\n")
    (d / "prices_string.toml").write_text('[h100-sxm]\nusd_per_hour = "cheap"\n')
    (d / "prices_table_value.toml").write_text(
        '[h100-sxm]\nusd_per_hour = { value = "x", source = "" }\n'
    )
    (d / "prices_not_table.toml").write_text("h100-sxm = 2.5\n")
    (d / "prices_unknown_key.toml").write_text("[h100-sxm]\nusd_per_hour = 2.5\ncolour = 1\n")
    (d / "prices_bad_toml.toml").write_text("[h100-sxm\nusd_per_hour = \n")
    (d / "prices_nested.toml").write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")
    (d / "prices_empty.toml").write_text("")
    (d / "prices_5000_digits.toml").write_text("[h100-sxm]\nusd_per_hour = " + "9" * 5000 + "\n")


def _hf_configs(d: Path) -> None:
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    edits: dict[str, dict[str, object]] = {
        "ok": {},
        "hidden_string": {"hidden_size": "2048"},
        "hidden_zero": {"hidden_size": 0},
        "hidden_negative": {"hidden_size": -2048},
        "hidden_float": {"hidden_size": 2048.5},
        "hidden_huge": {"hidden_size": 10**40},
        "heads_zero": {"num_attention_heads": 0},
        "kv_heads_not_dividing": {"num_key_value_heads": 3},
        "layers_null": {"num_hidden_layers": None},
        "tie_string": {"tie_word_embeddings": "yes"},
        "experts_zero": {"model_type": "mixtral", "num_local_experts": 0, "num_experts_per_tok": 2},
        "experts_k_gt": {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 9},
        "experts_nan": {
            "model_type": "mixtral",
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "router_aux_loss_coef": 0.02,
            "intermediate_size": float("nan"),
        },
        "sliding_negative": {"sliding_window": -5},
    }
    for name, edit in edits.items():
        (d / f"hf_{name}" / "config.json").parent.mkdir()
        (d / f"hf_{name}" / "config.json").write_text(json.dumps({**base, **edit}))
    (d / "hf_nan.json").write_text(json.dumps({**base, "hidden_size": float("nan")}))
    (d / "hf_inf.json").write_text(json.dumps({**base, "num_hidden_layers": float("inf")}))
    (d / "hf_5000_digits.json").write_text(
        json.dumps(base).replace('"hidden_size": 2048', '"hidden_size": ' + "9" * 5000)
    )
    (d / "hf_list.json").write_text("[1, 2, 3]\n")
    (d / "hf_empty.json").write_text("")
    (d / "hf_not_json.json").write_text("{hidden_size: 2048,,}\n")
    (d / "hf_nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "hf_bad_utf8.json").write_bytes(b'{"model_type": "\xff\xfe"}')
    (d / "hf_missing.json").write_text('{"model_type": "llama"}\n')


def make_new_fixtures(work: Path, big_rows: int) -> None:
    d = work / "in"
    _templates(d)
    _traces(d, big_rows)
    _prices(d)
    _hf_configs(d)
    _model_files(d)
    _huge_legal(d)
    (d / "step_existing.json").write_text("{}\n")
    if not (work / "fifo.json").exists():
        os.mkfifo(work / "fifo.json")


def _model_files(d: Path) -> None:
    root = Path(__file__).resolve().parent.parent / "src" / "shardline" / "models" / "catalog"
    text = (root / "llama-3.2-1b.toml").read_text(encoding="utf-8")
    edits = {
        "ok": ("", ""),
        "d_model_nan": ("value = 2048,", "value = nan,"),
        "d_model_neg": ("value = 2048,", "value = -2048,"),
        "5000_digits": ("value = 2048,", "value = " + "9" * 5000 + ","),
        "layers_huge": ("value = 16,", "value = 1_000_000_000_000,"),
        "heads_string": ("value = 32,", 'value = "32",'),
        "unknown_key": ("attention = ", "colour = 1\nattention = "),
    }
    for name, (old, new) in edits.items():
        body = text.replace(old, new, 1) if old else text
        (d / f"model_{name}.toml").write_text(body, encoding="utf-8")
    moe = (
        '\n[moe]\nexperts = { value = 4, source = "x" }\n'
        'experts_per_token = { value = 8, source = "x" }\n'
        'expert_d_ff = { value = 1024, source = "x" }\n'
    )
    (d / "model_moe_k_gt.toml").write_text(text + moe, encoding="utf-8")
    (d / "model_moe_experts0.toml").write_text(
        text + moe.replace("value = 4", "value = 0").replace("value = 8", "value = 1"),
        encoding="utf-8",
    )


def _huge_legal(d: Path) -> None:
    """Workload stacks of many [[layer]] tables: 200,000 (16 MB, under the 100 MB file limit and
    the 250,000-layer limit), 250,001 (one past it), and 20,001 and 20,000 distinct layers (one
    past the 20,000 limit on layers that differ in more than their name, and at it)."""
    head = 'name = "many"\n[dims]\nM = 4096\nN = 4096\nK = 4096\n'
    layer = '[[layer]]\nname = "l{}"\neinsum = "x[M,N] * w[N,K] -> y[M,K]"\nweights = ["w"]\n'
    for name, count in (("200k", 200_000), ("250001", 250_001)):
        body = head + "".join(layer.format(i) for i in range(count))
        (d / f"stack_layers_{name}.toml").write_text(body)
    sized = '[[layer]]\nname = "l{0}"\nm = 64\nk = 64\nn = {1}\n'
    for name, count in (("20001", 20_001), ("20000", 20_000)):
        body = "".join(sized.format(i, i + 1) for i in range(count))
        (d / f"stack_layers_{name}.toml").write_text(body)
