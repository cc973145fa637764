"""Each rule against arithmetic written out by hand."""

import sympy

from cost_models.op_accounting import TensorRef, count_op

B, S = sympy.symbols("B S", positive=True, integer=True)


def act(*shape, itemsize=2):
    return TensorRef(tuple(shape), itemsize)


def weight(*shape, expert=False):
    return TensorRef(tuple(shape), 2, "weight", expert=expert)


def test_linear_counts_2mnk_and_reads_the_weight_once():
    c = count_op("linear", [act(B, S, 4096), weight(1024, 4096)], [act(B, S, 1024)])
    assert c.kind == "matmul"
    assert sympy.expand(c.flops - 2 * B * S * 4096 * 1024) == 0
    assert c.weight_elems == 1024 * 4096
    assert sympy.expand(c.act_bytes - (B * S * 4096 * 2 + B * S * 1024 * 2)) == 0


def test_mm_uses_torch_flop_counter():
    c = count_op("mm", [act(8, 16), act(16, 32)], [act(8, 32)], args=[(8, 16), (16, 32)])
    assert c.flops == 2 * 8 * 16 * 32


def test_attention_counts_qk_and_pv_and_reads_grouped_kv_once():
    # 8 query heads share 2 KV heads: the kernel input is an expanded view of the 2-head cache.
    q = act(1, 8, 1, 64)
    k = TensorRef((1, 8, 100, 64), 2, "kv", read_elems=1 * 2 * 100 * 64)
    v = TensorRef((1, 8, 100, 64), 2, "kv", read_elems=1 * 2 * 100 * 64)
    c = count_op("scaled_dot_product_attention", [q, k, v], [act(1, 8, 1, 64)])
    assert c.kind == "attention"
    assert c.flops == 2 * 8 * 1 * 100 * 64 * 2
    assert c.kv_elems == 2 * (2 * 100 * 64)


def test_attention_with_unequal_head_dims():  # MLA: q/k 48 wide, v 32 wide
    c = count_op("scaled_dot_product_attention", [act(2, 4, 5, 48), act(2, 4, 7, 48), act(2, 4, 7, 32)],
                 [act(2, 4, 5, 32)])
    assert c.flops == 2 * 2 * 4 * 5 * 7 * 48 + 2 * 2 * 4 * 5 * 7 * 32


def test_latent_attention_reads_the_latent_cache_once():
    # Absorbed MLA decode: 128 heads query a 576-wide latent cache of 100 tokens; values are its first 512 columns.
    q = act(B, 128, 1, 576)
    latent = TensorRef((B, 1, 100, 576), 1, "kv")
    c = count_op("mla_decode_attention", [q, latent], [act(B, 128, 1, 512)])
    assert c.kind == "attention"
    assert sympy.expand(c.flops - (2 * B * 128 * 100 * 576 + 2 * B * 128 * 100 * 512)) == 0
    assert sympy.expand(c.kv_elems - B * 100 * 576) == 0  # keys and values: one read of the cache
    assert sympy.expand(c.act_bytes - (B * 128 * 576 * 2 + B * 128 * 512 * 2)) == 0


def test_grouped_expert_matmul_counts_routed_rows_and_flags_expert_weights():
    tokens_x_k = 2 * B * S
    c = count_op("_grouped_mm", [act(tokens_x_k, 256), weight(8, 256, 1024, expert=True), act(8)],
                 [act(tokens_x_k, 1024)])
    assert sympy.expand(c.flops - 2 * tokens_x_k * 256 * 1024) == 0
    assert c.expert_weights and c.weight_elems == 8 * 256 * 1024


def test_embedding_reads_only_gathered_rows():
    c = count_op("embedding", [weight(128256, 4096), act(B, S, itemsize=8)], [act(B, S, 4096)])
    assert sympy.expand(c.weight_elems - B * S * 4096) == 0


def test_kv_append_writes_only_new_entries():
    past = TensorRef((B, 8, S, 128), 2, "kv")
    new = act(B, 8, 1, 128)
    c = count_op("cat", [past, new], [TensorRef((B, 8, S + 1, 128), 2, "kv")], kv_append=True)
    assert sympy.expand(c.kv_elems - B * 8 * 128) == 0 and c.flops == 0


def test_masks_views_and_unknown_ops():
    assert count_op("le", [act(B, S)], [act(B, S)], is_mask=True).kind == "mask"
    assert count_op("transpose", [act(B, S)], [act(S, B)]).kind == "layout"
    assert count_op("frobnicate", [act(B)], [act(B)]).kind == "unaccounted"


def test_in_place_variant_costs_like_functional():
    a = count_op("add_", [act(B, 4), act(B, 4)], [act(B, 4)])
    b = count_op("add", [act(B, 4), act(B, 4)], [act(B, 4)])
    assert a == b and a.kind == "elementwise"
