! mpi_driver.f90 - greenckpt_mpi_mod.f90 under mpiexec, for the tests; the same steps as
! mpi_driver.c: every rank begins a checkpoint with (rank + 1) * 1000 bytes (rank NEG_RANK,
! argument 3: -5 bytes), rank FAIL_RANK (argument 2, -1: none) ends it failed, and each rank
! prints "rank R node N leader L begin S io I end E", then its begin's status text and the
! name of the kind (C's const char * results, as Fortran strings).
program mpi_driver
  use mpi
  use greenckpt
  use greenckpt_mpi
  implicit none
  type(greenckpt_mpi_t) :: g
  integer :: ierr, rank, io, begin, end, ranks_per_node, fail_rank, neg_rank
  integer(greenckpt_size_kind) :: bytes
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  ranks_per_node = argument(1, 0)
  fail_rank = argument(2, -1)
  neg_rank = argument(3, -1)
  if (greenckpt_mpi_init(g, MPI_COMM_WORLD, ranks_per_node) < 0) &
       call MPI_Abort(MPI_COMM_WORLD, 3, ierr)
  bytes = (rank + 1) * 1000_greenckpt_size_kind
  if (rank == neg_rank) bytes = -5
  io = -1
  begin = greenckpt_mpi_begin(g, GREENCKPT_CHECKPOINT, 2, '/tmp', bytes, io)
  end = greenckpt_mpi_end(g, GREENCKPT_CHECKPOINT, rank /= fail_rank)
  print '(6(a,i0),5a)', 'rank ', rank, ' node ', g%node, ' leader ', merge(1, 0, g%leader), &
       ' begin ', begin, ' io ', io, ' end ', end, ': ', greenckpt_strerror(begin), ' (', &
       greenckpt_kind_name(GREENCKPT_CHECKPOINT), ')'
  call greenckpt_mpi_free(g)
  call MPI_Finalize(ierr)

contains

  integer function argument(n, default) result(value)
    integer, intent(in) :: n, default
    character(len=32) :: text
    integer :: length, status
    value = default
    call get_command_argument(n, text, length, status)
    if (status == 0 .and. length > 0) read (text, *) value
  end function argument

end program mpi_driver
