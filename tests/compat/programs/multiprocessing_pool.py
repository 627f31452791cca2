"""Python multiprocessing with the start method named on the command line (fork or spawn)."""
import multiprocessing as mp
import sys


def square(value):
    return value * value


if __name__ == "__main__":
    mp.set_start_method(sys.argv[1])
    with mp.Pool(2) as pool:
        print(sys.argv[1], pool.map(square, range(12)))
    process = mp.Process(target=square, args=(3,))
    process.start()
    process.join()
    print("child exit code", process.exitcode)
