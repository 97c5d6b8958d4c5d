! greenckpt_mpi_mod.f90 - the collective helpers of greenckpt_mpi.h for Fortran MPI codes.
!
! Why in Fortran and not bound to C: greenckpt_mpi.h is header only (static inline, so
! libgreenckpt needs no MPI) and has no symbols to bind to; these are the same steps written
! with the MPI library's own Fortran bindings (`use mpi`), so the module needs nothing but the
! MPI the application is built with. Compile it after greenckpt_mod.f90, with the application:
!
!     mpifort $(greenckpt config --fortran-module --fortran-mpi-module) app.f90 \
!         $(greenckpt config --libs)
!
! Same names, arguments and rules as in C (docs/native.md): collective over the communicator
! given to greenckpt_mpi_init; the node's lowest rank announces with the sum of its ranks'
! bytes; every rank gets rank 0's advice and its node leader's status. Differences: the state
! is a type(greenckpt_mpi_t) (Fortran cannot name a type as its module); communicators are
! the integer handles of `use mpi` (with mpi_f08, pass comm%MPI_VAL); `ok` is a logical and
! greenckpt_mpi_free a subroutine, as C's returns nothing.
module greenckpt_mpi
  use mpi
  use, intrinsic :: iso_fortran_env, only: error_unit, int64
  use greenckpt, only: greenckpt_begin, greenckpt_end, greenckpt_set_node, &
       greenckpt_kind_name, GREENCKPT_OK, GREENCKPT_EINVAL, GREENCKPT_ESTATE, &
       GREENCKPT_ERUNTIME
  implicit none
  private

  !> The state of the helpers, one per communicator (C's greenckpt_mpi).
  type, public :: greenckpt_mpi_t
     integer :: comm = MPI_COMM_NULL       !< a duplicate of the job's communicator
     integer :: node_comm = MPI_COMM_NULL  !< the ranks of this node
     integer :: node = 0                   !< this node's index in the job (0 .. nodes-1)
     logical :: leader = .false.           !< true on the node's lowest rank, which announces
     logical :: begun(0:4) = .false.       !< per kind: the leader's begin opened a phase
  end type greenckpt_mpi_t

  public :: greenckpt_mpi_init, greenckpt_mpi_begin, greenckpt_mpi_end, greenckpt_mpi_free

contains

  !> Collective. ranks_per_node > 0 emulates nodes of that many consecutive ranks (tests, one
  !> host); 0 groups the ranks that share memory (a host). Sets the node index sent with every
  !> announcement. Returns GREENCKPT_OK or GREENCKPT_EINVAL.
  integer function greenckpt_mpi_init(g, comm, ranks_per_node) result(status)
    type(greenckpt_mpi_t), intent(out) :: g
    integer, intent(in) :: comm, ranks_per_node
    integer :: rank, node_rank, is_first, first, ierr
    if (ranks_per_node < 0) then
       status = GREENCKPT_EINVAL
       return
    end if
    call MPI_Comm_dup(comm, g%comm, ierr)
    call MPI_Comm_rank(g%comm, rank, ierr)
    if (ranks_per_node > 0) then
       call MPI_Comm_split(g%comm, rank / ranks_per_node, rank, g%node_comm, ierr)
    else
       call MPI_Comm_split_type(g%comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &
            g%node_comm, ierr)
    end if
    call MPI_Comm_rank(g%node_comm, node_rank, ierr)
    g%leader = node_rank == 0
    ! a node's index: how many node leaders have a lower rank (as in C)
    is_first = merge(1, 0, g%leader)
    first = 0
    call MPI_Exscan(is_first, first, 1, MPI_INTEGER, MPI_SUM, g%comm, ierr)
    if (rank == 0) first = 0  ! MPI_Exscan leaves rank 0's result undefined
    g%node = first
    call MPI_Bcast(g%node, 1, MPI_INTEGER, 0, g%node_comm, ierr)
    status = greenckpt_set_node(g%node)
  end function greenckpt_mpi_init

  !> Collective. A phase of `kind` starts: node leaders announce with their node's bytes (the
  !> sum of every rank's `bytes`); every rank gets rank 0's advice in io_processes (0: none)
  !> and its node leader's status.
  integer function greenckpt_mpi_begin(g, kind, level, path, bytes, io_processes) &
       result(status)
    type(greenckpt_mpi_t), intent(inout) :: g
    integer, intent(in) :: kind, level
    character(len=*), intent(in) :: path
    integer(int64), intent(in) :: bytes
    integer, intent(out), optional :: io_processes
    integer(int64) :: mine(2), node(2)
    integer :: out(2), ierr  ! status, advice
    out = [GREENCKPT_OK, 0]
    mine = [max(bytes, 0_int64), merge(1_int64, 0_int64, bytes < 0)]
    node = 0
    call MPI_Reduce(mine, node, 2, MPI_INTEGER8, MPI_SUM, 0, g%node_comm, ierr)
    if (g%leader .and. node(2) > 0) then
       write (error_unit, '(a,a,a,i0,a,i0,a)') 'greenckpt: greenckpt_mpi_begin(', &
            name_of(kind), '): ', node(2), ' rank(s) of node ', g%node, &
            ' gave a negative size; give each rank''s bytes (>= 0)'
       flush (error_unit)
       out(1) = GREENCKPT_EINVAL
    else if (g%leader) then
       out(1) = greenckpt_begin(kind, level, path, node(1), out(2))
       ! a begin that opened the phase in this thread (even one the runtime refused)
       if (kind >= 0 .and. kind <= 4) &
            g%begun(kind) = out(1) >= 0 .or. out(1) == GREENCKPT_ERUNTIME
    end if
    call MPI_Bcast(out(2), 1, MPI_INTEGER, 0, g%comm, ierr)       ! rank 0's advice
    call MPI_Bcast(out(1), 1, MPI_INTEGER, 0, g%node_comm, ierr)  ! the node leader's status
    if (present(io_processes)) io_processes = out(2)
    status = out(1)
  end function greenckpt_mpi_begin

  !> Collective. The phase of `kind` is over; it failed on the node if `ok` is false on any of
  !> its ranks. Returns the node leader's status (GREENCKPT_ESTATE, silently, when its begin
  !> was refused: that begin already said why).
  integer function greenckpt_mpi_end(g, kind, ok) result(status)
    type(greenckpt_mpi_t), intent(inout) :: g
    integer, intent(in) :: kind
    logical, intent(in) :: ok
    integer(int64) :: mine(1), all_ok(1)  ! int64 as in begin: one type per MPI routine
    integer :: ierr
    mine = merge(1_int64, 0_int64, ok)
    all_ok = 1
    status = GREENCKPT_OK
    call MPI_Reduce(mine, all_ok, 1, MPI_INTEGER8, MPI_MIN, 0, g%node_comm, ierr)
    if (g%leader .and. kind >= 0 .and. kind <= 4) then
       if (.not. g%begun(kind)) status = GREENCKPT_ESTATE
    end if
    if (g%leader .and. status == GREENCKPT_OK) then
       status = greenckpt_end(kind, all_ok(1) == 1)
       if (kind >= 0 .and. kind <= 4) g%begun(kind) = .false.
    end if
    call MPI_Bcast(status, 1, MPI_INTEGER, 0, g%node_comm, ierr)
  end function greenckpt_mpi_end

  !> Collective. Frees the communicators made by greenckpt_mpi_init.
  subroutine greenckpt_mpi_free(g)
    type(greenckpt_mpi_t), intent(inout) :: g
    integer :: ierr
    call MPI_Comm_free(g%node_comm, ierr)
    call MPI_Comm_free(g%comm, ierr)
  end subroutine greenckpt_mpi_free

  function name_of(kind) result(text)
    integer, intent(in) :: kind
    character(len=:), allocatable :: text
    text = greenckpt_kind_name(kind)
    if (len(text) == 0) text = '?'
  end function name_of

end module greenckpt_mpi
