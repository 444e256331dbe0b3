"""The capstone (`make capstone`): the student's own CausalSelfAttention and KVCache running a model.

    python -m autograder capstone [--submission PATH] [--steps N] [--seed S]      a small decoder, trained here
    python -m autograder capstone --model gpt2 [--weights DIR]                    GPT-2 small's released weights

First the kit grades the two stages the model rests on (heads and kv_cache, in the sandboxed children
as `make grade` does), and stops there when one of them does not pass. After that, the student's
module is imported into this process and run directly: this is the student's own code on the
student's own machine, and training needs autograd through it, which the children's wire does not
carry. Nothing here decides a point.

model.py is the decoder around the student's attention, induction.py the task and its training,
gpt2.py the released checkpoint and its reference forward, page.py the HTML page, run.py the command.
"""
