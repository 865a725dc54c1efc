"""Reading launch scripts as bash runs them: expansion, quoting, arrays, arithmetic, if-blocks."""

from __future__ import annotations

from planner.engines.shell import (
    Variables,
    before_redirection,
    evaluate_condition,
    first_marker,
    launch_flags,
    run_script,
)


def test_quoted_and_unquoted_expansions_split_as_bash_splits_them():
    var = Variables(scalars={"X": "1 2"}, arrays={"A": ["--x 1", "--y"], "E": []})
    assert var.words('$X "$X"') == ["1", "2", "1 2"]
    assert var.words("${A[@]}") == ["--x", "1", "--y"]  # unquoted: each item split again
    assert var.words('"${A[@]}"') == ["--x 1", "--y"]  # quoted: one word per item
    assert var.words('a "${E[@]}" b ""') == ["a", "b", ""]  # a quoted empty array makes no word; "" makes one
    assert var.words("'$X' \\$X") == ["$X", "$X"]


def test_defaults_positionals_arithmetic_and_command_substitution():
    var = Variables(scalars={"N": "8", "G": "4"})
    assert var.string('${1:-"checkpoints/run"}') == "checkpoints/run"
    assert var.words("${UNSET:-7} ${N:-7} ${N:+on} $((N * G / 3)) $(($N*2))") == ["7", "8", "on", "10", "16"]
    assert first_marker(var.words("$((2**99999999))")[0]) == "$((2**99999999))"  # not computed: it would not end
    out = var.words("$1 $(nproc --all) `hostname`")
    assert [first_marker(w) for w in out] == ["1", "$(nproc --all)", "`hostname`"]


def test_if_blocks_are_evaluated_when_the_test_only_compares_strings_or_integers():
    assert evaluate_condition(["[[", "fp8", "==", "fp8", "]]"]) is True
    assert evaluate_condition(["[", "3", "-gt", "4", "]", "||", "[", "-z", "", "]"]) is True
    assert evaluate_condition(["[", "!", "-f", "pretrain_gpt.py", "]"]) is None  # a file test: cannot tell
    text = """
DTYPE=bf16
ARGS=(--bf16)
if [[ "$DTYPE" == "fp8" ]]; then
    ARGS+=(--fp8-format hybrid)
elif [ "$DTYPE" = "fp16" ]
then
    ARGS=(--fp16)
else
    ARGS+=("--num-layers 2")
fi
python pretrain_gpt.py ${ARGS[@]}
"""
    flags, warnings = launch_flags(text, "s.sh")
    assert flags == ["--bf16", "--num-layers", "2"] and warnings == []


def test_an_undecidable_test_reads_every_branch_and_says_so_only_when_it_matters():
    text = """
if [ -f /etc/cluster_a ]; then
    TP=4
else
    TP=8
fi
if [ ! -f "$SCRIPT" ]; then echo "pretrain_gpt.py missing"; exit 1; fi
torchrun pretrain_gpt.py --tensor-model-parallel-size $TP
"""
    flags, warnings = launch_flags(text, "s.sh")
    assert flags == ["--tensor-model-parallel-size", "8"]
    assert len(warnings) == 1 and "line 2" in warnings[0] and "/etc/cluster_a" in warnings[0]


def test_launch_command_through_a_variable_quotes_spanning_lines_and_bash_c():
    text = '''
SCRIPT="examples/pretrain_gpt.py"
GPT_ARGS="
    --num-layers 4
    --hidden-size 256
"
echo "will run $SCRIPT"
python tools/preprocess_data.py --input x
torchrun --nproc_per_node 8 "$SCRIPT" $GPT_ARGS --bf16; echo done
python tools/convert.py --load x
'''
    flags, _ = launch_flags(text, "s.sh")
    assert flags == ["--num-layers", "4", "--hidden-size", "256", "--bf16"]  # the training script, not the tools
    flags, _ = launch_flags('srun -N 2 bash -c "torchrun pretrain_gpt.py --num-layers 4 --bf16"', "s.sh")
    assert flags == ["--num-layers", "4", "--bf16"]


def test_arguments_file_and_arrays_only_file():
    assert launch_flags("--num-layers 4  # comment\n--bf16 \\\n  --seq-length 128\n", "a.txt")[0] == [
        "--num-layers", "4", "--bf16", "--seq-length", "128"]
    assert launch_flags("A=(--num-layers 4)\nB=(--bf16)\n", "a.sh")[0] == ["--num-layers", "4", "--bf16"]


def test_a_quoted_angle_bracket_is_an_argument_not_a_redirection():
    # trl/scripts/sft.py's example passes --eos_token '<|im_end|>': bash passes it on; an unquoted `< file` redirects
    text = "python train.py --eos_token '<|im_end|>' --bos \"<s>\" --x 1 < input.txt\n"
    tokens = before_redirection(run_script(text, "s.sh").commands[-1][1])
    assert tokens[-6:] == ["--eos_token", "<|im_end|>", "--bos", "<s>", "--x", "1"]


def test_eval_reads_the_operators_in_its_words_again():
    # DeepSpeed's Megatron examples build the launch in a string and `eval ${run_cmd}` it, redirecting inside
    text = 'run_cmd="deepspeed pretrain_gpt.py --x 1 &> log.txt"\neval ${run_cmd}\n'
    tokens = run_script(text, "s.sh").commands[-1][1]
    assert before_redirection(tokens) == ["eval", "deepspeed", "pretrain_gpt.py", "--x", "1"]
