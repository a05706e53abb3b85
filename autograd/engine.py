"""Reverse-mode differentiation: walk the graph from an output back to the leaves.

The walk is iterative (an explicit stack), so a chain of 100,000 ops needs no recursion.
Gradients meeting at a node are summed before the node's backward runs, and leaf gradients
accumulate into `.grad` across calls, which is what makes a tensor used twice correct.
"""
from __future__ import annotations

from autograd import parallel
from autograd.allocator import keep_freed_memory
from autograd.function import Function
from autograd.grad_mode import no_grad


def _topological_order(root: Function) -> list[Function]:
    """Nodes reachable from `root`, each after every node that consumes it."""
    # Iterative depth-first post-order. A node is marked when it is expanded, not when it is
    # pushed: marking on push lets a node reached by two paths be emitted before a consumer
    # still waiting on the stack (e.g. y = e / e.sum()), which would lose that consumer's gradient.
    order: list[Function] = []
    visited: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in visited:
            continue  # pushed twice (two consumers); already expanded through the other
        visited.add(id(node))
        if node.freed:
            raise RuntimeError(
                "backward through a graph whose saved values were already freed: a second "
                "backward() over the same graph needs backward(retain_graph=True) the first time"
            )
        stack.append((node, True))
        for parent in node.parents:
            if isinstance(parent, Function) and id(parent) not in visited:
                stack.append((parent, False))
    order.reverse()  # root first, leaves' consumers last
    return order


def _run_hooks(hooks, grad):
    for hook in hooks or ():
        replaced = hook(grad)
        if replaced is not None:
            grad = replaced
    return grad


def backward(root_tensor, grad, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) * grad into every leaf's `.grad`."""
    keep_freed_memory()   # a training loop: its steps reuse the same large blocks (autograd/allocator.py)
    root = root_tensor._node
    order = _topological_order(root)
    pending = {id(root): grad}
    # Leaf gradients are summed over all paths first, so that a leaf's hooks see (and may
    # replace) its whole gradient of this pass, once, as for a non-leaf tensor.
    leaf_grads: dict[int, list] = {}
    try:
        with no_grad():
            _walk(order, pending, leaf_grads, retain_graph)
    finally:
        parallel.drain()   # the deferred leaf products (autograd.parallel.defer) are read next
    owned: set[int] = set()
    for leaf, pg, shared in leaf_grads.values():
        _accumulate_leaf(leaf, pg, shared, owned)


def _walk(order: list, pending: dict, leaf_grads: dict, retain_graph: bool) -> None:
    """Run every node's backward in `order`, passing gradients on to its parents' entries in
    `pending` and collecting the leaves' in `leaf_grads` ({id: [leaf, grad, shared?]})."""
    for node in order:
        g = pending.pop(id(node), None)
        if g is None:
            if not retain_graph:
                node.release()
            continue  # no gradient flows into this node (e.g. an unused branch)
        if node.hooks:
            g = _run_hooks(node.hooks, g)
        if node.retained is not None:
            kept = node.retained()
            if kept is not None:
                kept.grad = g.copy() if kept.grad is None else kept.grad + g
        node.last_backward = not retain_graph
        grads = node.backward(g)
        if len(grads) != len(node.parents):
            raise RuntimeError(
                f"internal error: {type(node).__name__}.backward returned {len(grads)} "
                f"gradients for {len(node.parents)} inputs"
            )
        for parent, pg in zip(node.parents, grads):
            if parent is None or pg is None:
                continue
            if isinstance(parent, Function):
                key = id(parent)
                pending[key] = pg if key not in pending else pending[key] + pg
            else:
                # Only remember whether pg *is* the incoming gradient (then it may be shared
                # with other inputs): holding g itself would keep every node's incoming
                # gradient alive until the end of the pass.
                entry = leaf_grads.get(id(parent))
                if entry is None:
                    leaf_grads[id(parent)] = [parent, pg, pg is g]
                else:
                    parallel.drain()   # either term may still be filled by a deferred task
                    entry[1] = entry[1] + pg
                    entry[2] = False  # a fresh sum: owned by nobody else
        if not retain_graph:
            node.release()
        # Drop this node's gradients now: kept in locals they would stay alive through
        # the next node's backward (or, after the last node, through the whole leaf pass).
        g = grads = pg = None


def _accumulate_leaf(leaf, grad, shared: bool, owned: set[int]) -> None:
    if leaf._hooks:
        grad = _run_hooks(leaf._hooks, grad)
    if grad.dtype != leaf.data.dtype:
        grad = grad.astype(leaf.data.dtype)
    if grad.shape != leaf.data.shape:
        raise RuntimeError(
            f"internal error: gradient of shape {grad.shape} for a leaf of shape {leaf.data.shape}"
        )
    if leaf.grad is None:
        # The backward may hand the same array to several inputs (add) or pass a view of its
        # incoming gradient: copy so that no two leaves share one .grad buffer and in-place
        # updates of one .grad (clipping, accumulation) never touch another array.
        if (shared or grad.base is not None or id(grad) in owned
                or not getattr(grad.flags, "writeable", True)):
            grad = grad.copy()
        leaf.grad = grad
        owned.add(id(grad))
    else:
        leaf.grad += grad
