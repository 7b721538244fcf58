%% What `rabbitmqctl eval` runs to delete the queues earlier test runs left
%% on the local node (scripts/services.d/rabbitmq.sh and the tests'
%% sweep_test_queues read this one file). A test queue's name starts with
%% `ct.` and carries a UUID v7 (its first 48 bits: when it was made, in ms);
%% it is deleted three hours after that, so a run in progress (a 60-minute
%% campaign) keeps its queues. A `ct.` name without a UUID v7 is from an
%% older run: deleted. The caller binds `Mine` first: `none`, or a prefix
%% whose queues are deleted whatever their age (a test file's own, between
%% its cases). Prints how many were deleted.
Now = os:system_time(millisecond),
MaxAge = 3 * 3600 * 1000,
Made = fun(Part) -> case Part of <<Ts:12/binary, 55, _:19/binary>> -> try binary_to_integer(Ts, 16) catch _:_ -> none end; _ -> none end end,
Stale = fun(Name) -> case binary:split(Name, <<".">>, [global]) of [<<"ct">> | Parts] -> case [T || P <- Parts, T <- [Made(P)], T =/= none] of [T | _] -> T < Now - MaxAge; [] -> true end; _ -> false end end,
Yours = fun(Name) -> is_binary(Mine) andalso binary:longest_common_prefix([Name, Mine]) =:= byte_size(Mine) end,
length([rabbit_amqqueue:delete(Q, false, false, <<"sweep">>) || Q <- rabbit_amqqueue:list(), N <- [element(4, amqqueue:get_name(Q))], Stale(N) orelse Yours(N)]).
