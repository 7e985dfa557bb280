"""toolkit.notebook.friendly_errors in a real kernel: one line for an unwritten exercise
and for what it leaves undefined; every other error keeps its traceback, less torch's
module-call frames."""

from types import SimpleNamespace

import nbformat
from nbclient import NotebookClient

from autograder.student.toolkit_wheel import stub_message as toolkit_stub
from autograder.student.toolkit_wheel import withheld_message
from autograder.workspace.release_steps import stub_message as notebook_stub
from toolkit.notebook import _defined_names, unwritten_exercise

#: What the student toolkit's `causal_mask` raises while 01-attention is locked.
LEFT_OUT = toolkit_stub("causal_mask", SimpleNamespace(name="01-attention", title="Attention"))
#: What the student toolkit's tuned kernel raises while 04-flash-attention is locked.
WITHHELD = withheld_message("flash_attention_tuned",
                            SimpleNamespace(name="04-flash-attention", title="FlashAttention"))
CELLS = [
    "from toolkit.notebook import friendly_errors\nfriendly_errors()",
    "def GPT():\n    raise NotImplementedError("
    "'`GPT.__init__` is not written yet (Exercise 3: GPT): write it in its cell')",
    "my_model = GPT()",
    "print(my_model)",
    "print(not_defined_by_any_cell)",
    "from toolkit.notebook import NotReadyError\n"
    "if True:\n"
    "    raise NotReadyError('ckpt.safetensors not found: run the training section')\n"
    "reloaded = 1",
    "print(reloaded.config)",
    f"def causal_mask(n):\n    raise NotImplementedError({LEFT_OUT!r})\nmask = causal_mask(3)",
    # A mistake two modules deep: the traceback goes from the call to the line, with none
    # of torch's Module.__call__ frames between them.
    "import torch\nfrom torch import nn\n"
    "class Norm(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return x - x.mean(0)[:3]\n"
    "class Block(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.norm = Norm()\n"
    "    def forward(self, x):\n"
    "        return self.norm(x)\n"
    "Block()(torch.zeros(2, 5, 8))",
    "import sys\nprint(type(sys.last_value).__name__)  # %debug still finds the error",
    # A kernel stub called through a written wrapper: Triton's interpreter wraps the stub's
    # error in its own, which still gets the one line.
    "import os\nos.environ['TRITON_INTERPRET'] = '1'\n"
    "import torch, triton\n"
    "@triton.jit\n"
    "def copy_kernel(X):\n"
    "    raise NotImplementedError("
    "'`copy_kernel` is not written yet (Exercise 3a: the kernel): write it in its cell')\n"
    "copy_kernel[(1,)](torch.zeros(4))",
    f"def flash_attention_tuned(q):\n    raise NotImplementedError({WITHHELD!r})\n"
    "out = flash_attention_tuned(1)",
]


def test_defined_names():
    src = "import torch.nn as nn\nx, (y, z) = 1, (2, 3)\nwith ctx():\n    m = 1\ndef f(): pass"
    assert _defined_names(src) == {"nn", "x", "y", "z", "m", "f"}
    assert _defined_names("def (") == set()


def test_both_stub_formats_are_read():
    heading = "Exercise 3: `GPT` (tying, `unembed`, `forward`)"
    assert unwritten_exercise(NotImplementedError(notebook_stub("GPT.__init__", heading))) == (
        "GPT.__init__", heading, "not written yet")
    stub = unwritten_exercise(NotImplementedError(LEFT_OUT))
    assert stub == ("causal_mask", "assignment 01-attention", "not written yet")
    assert stub.in_student_toolkit
    withheld = unwritten_exercise(NotImplementedError(WITHHELD))
    assert withheld == ("flash_attention_tuned", "assignment 04-flash-attention", "withheld")
    assert withheld.reason == "`flash_attention_tuned` is withheld (assignment 04-flash-attention)"
    assert unwritten_exercise(NotImplementedError()) is None
    assert unwritten_exercise(ValueError(LEFT_OUT)) is None


def test_messages_in_a_kernel():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(c, metadata={"tags": ["raises-exception"]}) for c in CELLS])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    errors = [next((o for o in c.outputs if o["output_type"] == "error"), None)
              for c in nb.cells]
    assert errors[0] is None and errors[1] is None
    needs, missing, other, not_ready, after, left_out, deep = errors[2:9]
    assert needs["ename"] == "NotImplementedError" and needs["traceback"] == [
        "‖ This cell needs `GPT.__init__`, which is not written yet (Exercise 3: GPT). "
        "Write it, run its cell, then run this cell again."]
    assert missing["ename"] == "NameError" and missing["traceback"] == [
        "‖ `my_model` does not exist yet: the cell that makes it stopped because "
        "`GPT.__init__` is not written yet (Exercise 3: GPT)."]
    assert other["ename"] == "NameError" and len(other["traceback"]) > 1  # the usual traceback
    # A step that is not done yet: its own message, then what it leaves undefined.
    assert not_ready["ename"] == "NotReadyError" and not_ready["traceback"] == [
        "‖ ckpt.safetensors not found: run the training section"]
    assert after["traceback"] == [
        "‖ `reloaded` does not exist yet: the cell that makes it stopped because "
        "ckpt.safetensors not found: run the training section."]
    assert left_out["traceback"] == [
        "‖ This cell needs `causal_mask`, which is not written yet (assignment 01-attention). "
        "The toolkit you installed leaves it out until that assignment's solutions are "
        "unlocked: use your own."]
    assert deep["ename"] == "RuntimeError"
    shown = "\n".join(deep["traceback"])
    assert "Block.forward" in shown and "Norm.forward" in shown, shown
    assert "_call_impl" not in shown and "module.py" not in shown, shown
    assert nb.cells[9].outputs[0]["text"] == "RuntimeError\n"
    kernel = errors[10]
    assert kernel["traceback"] == [
        "‖ This cell needs `copy_kernel`, which is not written yet (Exercise 3a: the kernel). "
        "Write it, run its cell, then run this cell again."], kernel
    assert errors[11]["traceback"] == [
        "‖ This cell needs `flash_attention_tuned`, which is withheld (assignment "
        "04-flash-attention). The toolkit you installed holds it back until that "
        "assignment's solutions are unlocked, since it computes their answers."], errors[11]
