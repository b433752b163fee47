# Sourced by the GPU check's scripts (tests/gpu_check.sh, tests/gpu/failure_on_one_gpu.sh): unsets
# what would make a trainer or a test depend on the shell it runs in. A launcher's variables left
# set (torchrun's, Open MPI's, PMI's, Slurm's: common/dist/group.cpp reads them) would make a
# trainer wait for processes that do not exist; a meeting point or forced failure of stage 06's
# own tests (GPT_INIT_*, GPT_TEST_FAIL) would change what it does; NCCL's debug output would land
# in output that is checked line by line. CTest unsets the same for each GPU test
# (GPT_TEST_ENVIRONMENT_UNSET in tests/gpu/checks.cmake, which names them one by one).
for _var in $(compgen -e); do
    case $_var in
        WORLD_SIZE | RANK | LOCAL_RANK | LOCAL_WORLD_SIZE | MASTER_ADDR | MASTER_PORT | MPI_LOCALRANKID | \
            TORCHELASTIC_* | OMPI_COMM_WORLD_* | PMI_* | PMIX_* | SLURM_* | GPT_INIT_* | GPT_TEST_FAIL | NCCL_DEBUG*)
            unset "$_var" ;;
    esac
done
unset _var
